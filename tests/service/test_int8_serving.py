"""RAGMT_QUANTIZE=int8 / ort-int8: the served decoders use int8 weights (in PyTorch or ONNX
Runtime), /info says so, and what they translate is cached apart from what float decoders
translate."""

from __future__ import annotations

from pathlib import Path

import pytest

from models import native_step
from models.ort_decoder import int8_weights
from service.app import create_app, startup_summary
from service.settings import Settings
from tests.service.conftest import running
from tests.toy import gloss

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_int8_decoders_serve_and_are_cached_apart(bundle: Path, tmp_path: Path) -> None:
    texts = ["red house", "two blue tree"]
    apps = {
        q: create_app(Settings(model_path=bundle, stores_dir=tmp_path, beam_size=1, quantize=q))
        for q in ("none", "int8", "ort-int8")
    }
    ids = {}
    for q, app in apps.items():
        async with running(app) as c:
            resp = await c.post("/v1/translate", json={"texts": texts})
            assert resp.status_code == 200, resp.text
            assert [r["translation"] for r in resp.json()["results"]] == [gloss(t) for t in texts]
            (info,) = (await c.get("/info")).json()["models"]
            assert info["quantize"] == q
            assert info["int8_weights"] == (int8_weights() if q == "ort-int8" else None)
            engine = app.state.engine
            summary = startup_summary(app.state.settings, engine, engine.domains, "")
            (line,) = [x for x in summary if x.startswith("model ")]
            how = {
                "none": "",
                "int8": ", int8,",
                "ort-int8": f", ort-int8 with {int8_weights()} weights,",
            }
            assert how[q] in line and ("int8" in line) == (q != "none"), line
            model = app.state.engine.models[0]
            ids[q] = model.decoder_id
            assert model.translator.model is not model.bundle.model or q == "none"
    assert len(set(ids.values())) == 3
    assert ids["int8"].startswith(ids["none"]) and ids["ort-int8"].startswith(ids["none"])
    assert ids["ort-int8"].endswith(f"+ort-int8+{int8_weights()}")  # replicas' CPUs may differ


async def test_native_decoders_are_cached_apart_by_their_library(bundle: Path, tmp_path) -> None:
    """A native-int8 decoder's id names its kernels and its library's source: two versions
    of the library translate a little differently, and a rolling update runs both."""
    if not native_step.available()[0]:
        pytest.skip("no C++ compiler here")
    settings = Settings(model_path=bundle, stores_dir=tmp_path, beam_size=1, quantize="native-int8")
    app = create_app(settings)
    async with running(app) as c:
        resp = await c.post("/v1/translate", json={"texts": ["red house"]})
        assert resp.status_code == 200, resp.text
        model = app.state.engine.models[0]
    want = f"+native-int8+{int8_weights()}+{native_step.isa()}+{native_step.version()}"
    assert model.decoder_id.endswith(want)
    assert len(native_step.version()) == 12


def test_int8_is_refused_off_the_cpu() -> None:
    from torch import nn

    from models.quantize import quantize_int8

    with pytest.raises(ValueError, match="for CPU decoding"):
        quantize_int8(nn.Linear(2, 2, device="meta"))
