"""Device settings: resolved with clear errors; CUDA paths are tested only where CUDA exists."""

import pytest
import torch

from models.devices import cpu_bf16_speedup, decode_autocast_dtype, resolve_device

pytestmark = pytest.mark.unit

CUDA = torch.cuda.is_available()


def test_auto_follows_the_host_and_cpu_decodes_in_float32() -> None:
    device = resolve_device("auto")
    assert device.type == ("cuda" if CUDA else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert decode_autocast_dtype(torch.device("cpu")) is None


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "CPU", "cuda:x", ""])
def test_malformed_device_is_named(bad: str) -> None:
    with pytest.raises(ValueError, match="auto, cpu, cuda or cuda:N"):
        resolve_device(bad)


@pytest.mark.skipif(CUDA, reason="checks the refusal on a host without CUDA")
def test_cuda_on_a_cpu_host_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_cuda_decoding_matches_cpu_on_a_tiny_model() -> None:
    from models.decoding import beam_search
    from models.registry import build_model

    torch.manual_seed(0)
    cfg = {"vocab_size": 64, "d_model": 32, "n_heads": 4, "enc_layers": 1, "dec_layers": 1}
    model = build_model("transformer", {**cfg, "d_ff": 64, "dropout": 0.0, "max_len": 32}).eval()
    src = torch.randint(4, 64, (3, 7))
    cpu = beam_search(model, src, beam_size=2)
    dev = resolve_device("cuda")
    with torch.autocast("cuda", dtype=decode_autocast_dtype(dev)):
        gpu = beam_search(model.to(dev), src.to(dev), beam_size=2)
    assert sum(a == b for a, b in zip(cpu, gpu, strict=True)) >= 2  # half precision may tie-break


def test_bf16_speedup_is_a_measured_positive_ratio() -> None:
    """Training turns bf16 autocast off when this is below 1 (AVX2-only CPUs)."""
    ratio = cpu_bf16_speedup()
    assert 0.0 < ratio < 1000.0
