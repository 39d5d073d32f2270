"""Model bundles: a verified directory holding everything needed to translate.

Layout::

    manifest.json       kind "model-bundle", format_version, architecture, config, languages
                        (the first pair), pairs, tokenizer {kind, file}, decoding, reads,
                        trained_on, training_data, eval, created, weights {file, dtype, tied},
                        extras, and the sha256 of every file
    model.safetensors   the state dict (no pickle), each tied tensor stored once
    spm.model, ...      extra files copied in verbatim

Bundles are written with `atomic_directory`, so a reader (e.g. the service hot-swapping models)
never sees half of one, and `load_bundle` verifies every checksum before parsing anything.
`model_card` reads what a bundle declares about itself (pairs, tokenizer, decoding, the stores
it reads, its training data): what the pipeline and the service ask, instead of names.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import safetensors.torch
import torch
from torch import Tensor, nn

from models.artifacts import (
    MANIFEST,
    ArtifactError,
    atomic_directory,
    read_manifest,
    sha256_bytes,
    write_manifest,
)
from models.registry import ARCHITECTURES, architecture, build_model
from models.tokenizer import TOKENIZER_KINDS

__all__ = [
    "BUNDLE_KIND",
    "DTYPES",
    "FORMAT_VERSION",
    "WEIGHTS_FILE",
    "BundleError",
    "LoadedBundle",
    "ModelCard",
    "load_bundle",
    "model_card",
    "save_bundle",
    "update_eval",
]

BUNDLE_KIND = "model-bundle"
FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
SPM_FILE = "spm.model"  # a SentencePiece bundle's tokenizer

# Storage precision name (as written in the manifest) -> dtype.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}

# Manifest keys save_bundle owns; extra_manifest may not overwrite them.
_RESERVED = frozenset(
    {
        "kind",
        "format_version",
        "architecture",
        "config",
        "languages",
        "pairs",
        "tokenizer",
        "decoding",
        "reads",
        "trained_on",
        "training_data",
        "eval",
        "created",
        "weights",
        "parameters",
        "files",
    }
)


class BundleError(ArtifactError):
    """A model bundle is unusable: bad manifest fields, weights or architecture."""


Pair = tuple[str, str]


@dataclass(frozen=True)
class ModelCard:
    """What a bundle declares about itself, read from its manifest.

    `pairs`: the (source, target) languages it translates; `tokenizer`: "sentencepiece" (its
    file `tokenizer_file`) or "bytes"; `decoding`: "autoregressive" or "ctc"; `reads`: the store
    kinds it reads ("sentence-pairs"), () for none; `trained_on`: the training data's
    description (domains and sentence counts where recorded), so a user sees that a model
    trained on the Bible is a Bible model.
    """

    architecture: str
    pairs: tuple[Pair, ...]
    tokenizer: str
    tokenizer_file: str | None
    decoding: str
    reads: tuple[str, ...]
    parameters: int
    trained_on: dict[str, Any]

    @property
    def uses_memory(self) -> bool:
        return "sentence-pairs" in self.reads

    def to_dict(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "pairs": [list(p) for p in self.pairs],
            "tokenizer": self.tokenizer,
            "decoding": self.decoding,
            "reads": list(self.reads),
            "parameters": self.parameters,
            "trained_on": self.trained_on,
        }


def _pairs(value: Any) -> tuple[Pair, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"pairs must be a non-empty list of [source, target], got {value!r}")
    out = []
    for p in value:
        if (
            not isinstance(p, list | tuple)
            or len(p) != 2
            or not all(isinstance(x, str) and x for x in p)
            or p[0] == p[1]
        ):
            raise ValueError(f"a pair must be [source, target], two languages, got {p!r}")
        out.append((p[0], p[1]))
    if len(set(out)) != len(out):
        raise ValueError(f"pairs repeat: {value!r}")
    return tuple(out)


def model_card(manifest: Mapping[str, Any], root: Path | str = "bundle") -> ModelCard:
    """The bundle's declarations; BundleError when they are malformed or contradict the
    architecture's registry line. A bundle written before a field existed gets what such
    bundles were: its `languages` as its one pair, a SentencePiece `spm.model`, and the
    registry's decoding and store kinds."""
    arch = manifest.get("architecture")
    try:
        spec = architecture(arch)  # type: ignore[arg-type]
        langs = manifest.get("languages") or {}
        pairs = _pairs(manifest.get("pairs", [[langs.get("source"), langs.get("target")]]))
    except ValueError as e:
        raise BundleError(f"{root}: {e}") from None
    tok = manifest.get("tokenizer", {"kind": "sentencepiece", "file": SPM_FILE})
    if not isinstance(tok, dict) or tok.get("kind") not in TOKENIZER_KINDS:
        raise BundleError(f"{root}: tokenizer must be one of {list(TOKENIZER_KINDS)}, got {tok!r}")
    tok_file = tok.get("file") if tok["kind"] == "sentencepiece" else None
    if tok["kind"] == "sentencepiece" and tok_file not in manifest.get("files", {}):
        raise BundleError(f"{root}: its SentencePiece file {tok_file!r} is not in the bundle")
    decoding = manifest.get("decoding", spec.decoding)
    reads = tuple(manifest.get("reads", spec.reads))
    if (decoding, reads) != (spec.decoding, spec.reads):
        raise BundleError(
            f"{root}: declares decoding {decoding!r} reading {list(reads)}, but architecture "
            f"{arch!r} decodes {spec.decoding!r} reading {list(spec.reads)}"
        )
    trained_on = manifest.get("trained_on") or {"data_sha256": manifest.get("training_data", "")}
    return ModelCard(
        architecture=arch,  # type: ignore[arg-type]
        pairs=pairs,
        tokenizer=tok["kind"],
        tokenizer_file=tok_file,
        decoding=decoding,
        reads=reads,
        parameters=int(manifest.get("parameters", 0)),
        trained_on=dict(trained_on),
    )


@dataclass(frozen=True)
class LoadedBundle:
    """A verified bundle: the model (eval mode, float32), its manifest and its directory."""

    model: nn.Module
    manifest: dict[str, Any]
    path: Path

    def file(self, name: str) -> Path:
        """Path of a file the manifest lists (e.g. "spm.model"); BundleError if it lists none."""
        if name not in self.manifest["files"]:
            raise BundleError(f"{self.path}: bundle has no file {name!r}")
        return self.path / name


def _split_tied(state: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Keep one name per shared tensor; return (tensors, {dropped name: kept name}).

    safetensors refuses tensors that share memory, and tied weights (the output projection
    reusing the embedding) appear under two names in the state dict.
    """
    kept: dict[str, Tensor] = {}
    tied: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    for name, t in state.items():
        if t.numel() == 0:  # empty tensors may all report the same data pointer
            kept[name] = t
            continue
        key = (
            t.device,
            t.untyped_storage().data_ptr(),
            t.storage_offset(),
            tuple(t.shape),
            t.stride(),
            t.dtype,
        )
        if key in seen:
            tied[name] = seen[key]
        else:
            seen[key] = name
            kept[name] = t
    return kept, tied


def _check_relative(name: str) -> str:
    p = PurePosixPath(name)
    if not name or p.is_absolute() or ".." in p.parts or "\\" in name or p.as_posix() != name:
        raise ValueError(f"extra file name {name!r} must be a plain relative path")
    if name in (MANIFEST, WEIGHTS_FILE):
        raise ValueError(f"extra file name {name!r} is reserved")
    return name


def save_bundle(
    path: Path | str,
    model: nn.Module,
    arch: str,
    *,
    languages: Mapping[str, str],
    extra_files: Mapping[str, Path | str] | None = None,
    training_data: str = "",
    eval_scores: Mapping[str, Any] | None = None,
    extra_manifest: Mapping[str, Any] | None = None,
    dtype: str = "float32",
    pairs: Sequence[Pair] | None = None,
    tokenizer: str = "sentencepiece",
    trained_on: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write `model` as a bundle directory at `path` (replacing one there); return the manifest.

    extra_files maps a name inside the bundle to a file to copy (e.g. {"spm.model": path}); a
    SentencePiece model needs its file there. `pairs`: every (source, target) it translates
    (default: the one of `languages`). `trained_on`: what it was trained on (e.g. {"domains":
    {"bible": 29000}}). dtype is the storage precision; loading always gives float32.
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; known: {sorted(ARCHITECTURES)}")
    spec = ARCHITECTURES[arch]
    config_cls, model_cls = spec.config, spec.model
    # Exact types: a subclass must be registered (and saved) under its own name.
    if type(model) is not model_cls or type(model.config) is not config_cls:
        raise ValueError(f"model {type(model).__name__} is not architecture {arch!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if set(languages) != {"source", "target"} or not all(
        isinstance(v, str) and v for v in languages.values()
    ):
        raise ValueError(f"languages must be {{'source': str, 'target': str}}, got {languages!r}")
    clash = sorted(_RESERVED & set(extra_manifest or {}))
    if clash:
        raise ValueError(f"extra_manifest may not set reserved keys {clash}")
    all_pairs = _pairs(
        [list(p) for p in pairs] if pairs else [[languages["source"], languages["target"]]]
    )
    if (languages["source"], languages["target"]) not in all_pairs:
        raise ValueError(f"languages {dict(languages)} is not one of pairs {all_pairs}")
    extras = {_check_relative(n): Path(p) for n, p in (extra_files or {}).items()}
    if tokenizer not in TOKENIZER_KINDS:
        raise ValueError(f"tokenizer must be one of {list(TOKENIZER_KINDS)}, got {tokenizer!r}")
    if tokenizer == "sentencepiece" and SPM_FILE not in extras:
        raise ValueError(f"a SentencePiece model needs extra_files[{SPM_FILE!r}]")
    for name, src in extras.items():
        if not src.is_file():
            raise ValueError(f"extra file {name!r}: {src} is not a file")

    tensors, tied = _split_tied(model.state_dict())
    # Cloned onto the CPU so no two stored tensors share memory, cast to the storage dtype.
    tensors = {
        name: t.detach().to("cpu", DTYPES[dtype] if t.is_floating_point() else t.dtype).clone()
        for name, t in tensors.items()
    }
    manifest: dict[str, Any] = {
        **(extra_manifest or {}),
        "kind": BUNDLE_KIND,
        "format_version": FORMAT_VERSION,
        "architecture": arch,
        "config": model.config.to_dict(),
        "languages": {"source": languages["source"], "target": languages["target"]},
        "pairs": [list(p) for p in all_pairs],
        "tokenizer": {"kind": tokenizer, **({"file": SPM_FILE} if tokenizer != "bytes" else {})},
        "decoding": spec.decoding,
        "reads": list(spec.reads),
        "trained_on": dict(trained_on or {"data_sha256": training_data}),
        "training_data": training_data,
        "eval": dict(eval_scores or {}),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "weights": {"file": WEIGHTS_FILE, "dtype": dtype, "tied": tied},
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    json.dumps(manifest)  # fail before writing anything if a value is not JSON
    with atomic_directory(Path(path)) as tmp:
        safetensors.torch.save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        for name, src in extras.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, tmp / name)
        manifest = write_manifest(tmp, manifest)
    return manifest


def _weights_spec(root: Path, manifest: dict[str, Any]) -> tuple[str, dict[str, str]]:
    spec = manifest.get("weights")
    if not isinstance(spec, dict) or spec.get("file") != WEIGHTS_FILE:
        raise BundleError(f"{root}: manifest 'weights' must name {WEIGHTS_FILE}, got {spec!r}")
    dtype, tied = spec.get("dtype"), spec.get("tied", {})
    if dtype not in DTYPES:
        raise BundleError(f"{root}: unknown weights dtype {dtype!r}")
    if not isinstance(tied, dict) or not all(
        isinstance(a, str) and isinstance(b, str) for a, b in tied.items()
    ):
        raise BundleError(f"{root}: manifest 'weights.tied' must map names to names")
    return dtype, tied


def load_bundle(path: Path | str, device: str | torch.device = "cpu") -> LoadedBundle:
    """Verify and load a bundle; the model comes back in eval mode, float32, on `device`.

    Raises ArtifactError (BundleError for bundle-specific problems) on any mismatch.
    """
    root = Path(path)
    # Every checksum is verified before anything in the bundle is parsed.
    manifest = read_manifest(root, BUNDLE_KIND, FORMAT_VERSION)
    arch = manifest.get("architecture")
    if arch not in ARCHITECTURES:
        raise BundleError(f"{root}: unknown architecture {arch!r}; known: {sorted(ARCHITECTURES)}")
    model_card(manifest, root)  # its declarations are checked before the weights are read
    _, tied = _weights_spec(root, manifest)
    config = manifest.get("config")
    if not isinstance(config, dict):
        raise BundleError(f"{root}: manifest 'config' must be an object")

    # Hash the very bytes we parse: the file may have been swapped since read_manifest.
    data = (root / WEIGHTS_FILE).read_bytes()
    if sha256_bytes(data) != manifest["files"].get(WEIGHTS_FILE):
        raise BundleError(f"{root}: checksum mismatch for {WEIGHTS_FILE} (changed while loading)")
    try:
        tensors = safetensors.torch.load(data)
    except Exception as e:  # safetensors raises its own error types
        raise BundleError(f"{root}: cannot read {WEIGHTS_FILE}: {e}") from e
    del data
    for name, source in tied.items():
        if source not in tensors or name in tensors:
            raise BundleError(f"{root}: bad tie {name!r} -> {source!r}")
        tensors[name] = tensors[source]
    tensors = {n: t.float() if t.is_floating_point() else t for n, t in tensors.items()}

    try:
        model = build_model(arch, config)
    except ValueError as e:
        raise BundleError(f"{root}: bad config: {e}") from e
    try:
        model.load_state_dict(tensors, strict=True)  # copies in place, so ties stay ties
    except RuntimeError as e:
        raise BundleError(f"{root}: weights do not fit the architecture: {e}") from e
    model.to(device).eval()
    return LoadedBundle(model=model, manifest=manifest, path=root)


def update_eval(path: Path | str, scores: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `scores` into the bundle's `eval` and atomically replace its manifest.

    Only manifest.json changes, so the file checksums stay valid; readers see the old or the
    new manifest, never a partial one.
    """
    root = Path(path)
    manifest = read_manifest(root, BUNDLE_KIND, FORMAT_VERSION)
    manifest["eval"] = {**manifest.get("eval", {}), **scores}
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    # The temporary file lives beside the bundle, not in it: inside, a concurrent reader
    # would see a file the manifest does not list.
    fd, tmp = tempfile.mkstemp(prefix=f".{root.name}.manifest-", dir=root.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, root / MANIFEST)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return manifest
