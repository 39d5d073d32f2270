"""A decoding step in one C++ call (`models/native/step.cpp`), in place of ONNX Runtime's graph.

At batch 1 ONNX Runtime's step graph is some 200 operators of a few microseconds each for four
rows, where the arithmetic is a tenth of that (docs/decoding-speed.md). The native step does
the same computation as `models.ort_decoder._StepGraph` with int8 matrix products that read
their weights once for four rows (and for a wide batch once for all its rows) and with every
small operator fused into loops. It is
compiled for the CPU it runs on (`-march=native`) the first time it is needed, by the C++
compiler found on the host, and kept in a cache directory by a digest of its source, flags,
compiler and CPU; where no compiler is at hand, `available` says why and decoding stays on
ONNX Runtime.

Its int8 products quantize activations per row (uint8, a scale and zero point each), so a
sentence's translation does not depend on the other sentences of its batch, unlike ONNX
Runtime's dynamic quantization (one scale per call). Weights are int8 per output channel: full
int8 where the build sums u8 x s8 products exactly (AVX-512 VNNI, or the portable loops), kept
to -64..64 on AVX2 alone (`weight_limit`), as "s7" in `models.ort_decoder`.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from models import ort_decoder

__all__ = [
    "Int8Linear", "NativeEncoder", "NativeStep", "RepeatTables", "SelfAttentionCache",
    "SentenceTensors", "available", "library", "stack_keys", "stack_values", "supports",
    "version",
]  # fmt: skip

SOURCE = Path(__file__).parent / "native" / "step.cpp"
FLAGS = (
    "-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-std=c++17", "-shared",
    "-fPIC", "-pthread",
)  # fmt: skip
# Where built libraries are kept (RAGMT_NATIVE_CACHE, else the user's cache directory).
CACHE_ENV = "RAGMT_NATIVE_CACHE"
# The CPU the library is built for (-march): "native", this one (the default), or e.g.
# "x86-64-v3" (AVX2 without VNNI) or "x86-64" (the portable loops), which tests and benchmarks
# use to run the other kernels on one host.
ARCH_ENV = "RAGMT_NATIVE_ARCH"

HALF_MAX = 65504.0  # the largest finite IEEE half
_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # by -march: the loaded library, or why there is none (a str)


class _QLinear(ctypes.Structure):
    _fields_ = [
        ("n", ctypes.c_int), ("k", ctypes.c_int), ("np", ctypes.c_int), ("kp", ctypes.c_int),
        ("w", ctypes.c_void_p), ("scale", ctypes.c_void_p), ("wsum", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
    ]  # fmt: skip


class _Norm(ctypes.Structure):
    _fields_ = [("weight", ctypes.c_void_p), ("bias", ctypes.c_void_p)]


class _Layer(ctypes.Structure):
    _fields_ = [
        ("self_norm", _Norm), ("cross_norm", _Norm), ("ffn_norm", _Norm),
        ("qkv", _QLinear), ("self_out", _QLinear), ("cross_q", _QLinear),
        ("cross_out", _QLinear), ("memory_out", _QLinear),
        ("gate_source", ctypes.c_void_p), ("gate_source_bias", ctypes.c_float),
        ("gate_memory", ctypes.c_void_p), ("fc1", _QLinear), ("fc2", _QLinear),
    ]  # fmt: skip


class _EncoderLayer(ctypes.Structure):
    _fields_ = [
        ("self_norm", _Norm), ("ffn_norm", _Norm), ("qkv", _QLinear), ("self_out", _QLinear),
        ("fc1", _QLinear), ("fc2", _QLinear),
    ]  # fmt: skip


class _Encoder(ctypes.Structure):
    _fields_ = [
        ("d", ctypes.c_int), ("heads", ctypes.c_int), ("d_head", ctypes.c_int),
        ("n_layers", ctypes.c_int), ("layers", ctypes.POINTER(_EncoderLayer)),
    ]  # fmt: skip


class _EncodeIO(ctypes.Structure):
    _fields_ = [
        ("batch", ctypes.c_int), ("len", ctypes.c_int), ("threads", ctypes.c_int),
        ("x", ctypes.c_void_p), ("lengths", ctypes.c_void_p),
    ]  # fmt: skip


class _MemoryLayer(ctypes.Structure):
    _fields_ = [
        ("self_norm", _Norm), ("cross_norm", _Norm), ("ffn_norm", _Norm), ("qkv", _QLinear),
        ("self_out", _QLinear), ("cross_q", _QLinear), ("cross_kv", _QLinear),
        ("cross_out", _QLinear), ("fc1", _QLinear), ("fc2", _QLinear),
    ]  # fmt: skip


class _MemoryEncoder(ctypes.Structure):
    _fields_ = [
        ("d", ctypes.c_int), ("heads", ctypes.c_int), ("d_head", ctypes.c_int),
        ("vocab", ctypes.c_int), ("max_positions", ctypes.c_int), ("n_source", ctypes.c_int),
        ("n_target", ctypes.c_int), ("conditioned", ctypes.c_int),
        ("embed_scale", ctypes.c_float), ("embed", ctypes.c_void_p),
        ("positions", ctypes.c_void_p), ("source_layers", ctypes.POINTER(_MemoryLayer)),
        ("source_norm", _Norm), ("target_layers", ctypes.POINTER(_MemoryLayer)),
        ("norm", _Norm),
    ]  # fmt: skip


class _MemoryIO(ctypes.Structure):
    _fields_ = [
        ("sentences", ctypes.c_int), ("slots", ctypes.c_int), ("src_width", ctypes.c_int),
        ("tgt_width", ctypes.c_int), ("len", ctypes.c_int), ("width", ctypes.c_int),
        ("threads", ctypes.c_int), ("src", ctypes.c_void_p), ("tgt", ctypes.c_void_p),
        ("src_lens", ctypes.c_void_p), ("tgt_lens", ctypes.c_void_p),
        ("context", ctypes.c_void_p), ("context_lens", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
    ]  # fmt: skip


class _KeysValues(ctypes.Structure):
    _fields_ = [
        ("d", ctypes.c_int), ("heads", ctypes.c_int), ("d_head", ctypes.c_int),
        ("n_layers", ctypes.c_int), ("kv", ctypes.POINTER(_QLinear)),
    ]  # fmt: skip


class _ProjectIO(ctypes.Structure):
    _fields_ = [
        ("groups", ctypes.c_int), ("len", ctypes.c_int), ("ldk", ctypes.c_int),
        ("threads", ctypes.c_int), ("x", ctypes.c_void_p), ("lens", ctypes.c_void_p),
        ("kt", ctypes.c_void_p), ("v", ctypes.c_void_p),
    ]  # fmt: skip


class _Model(ctypes.Structure):
    _fields_ = [
        ("d", ctypes.c_int), ("heads", ctypes.c_int), ("d_head", ctypes.c_int),
        ("vocab", ctypes.c_int), ("n_layers", ctypes.c_int), ("memory", ctypes.c_int),
        ("eos", ctypes.c_int), ("max_positions", ctypes.c_int), ("embed_scale", ctypes.c_float),
        ("embed", ctypes.c_void_p), ("positions", ctypes.c_void_p),
        ("layers", ctypes.POINTER(_Layer)), ("final_norm", _Norm), ("output", _QLinear),
    ]  # fmt: skip


_P = ctypes.c_void_p


class _StepIO(ctypes.Structure):
    _fields_ = [
        ("rows", ctypes.c_int), ("groups", ctypes.c_int), ("past_rows", ctypes.c_int),
        ("past", ctypes.c_int), ("src", ctypes.c_int), ("mem", ctypes.c_int),
        ("n_best", ctypes.c_int), ("n_ban", ctypes.c_int), ("ldk_src", ctypes.c_int),
        ("ldk_mem", ctypes.c_int), ("threads", ctypes.c_int), ("position", ctypes.c_int64),
        ("tokens", _P), ("order", _P), ("ban", _P), ("src_bias", _P), ("mem_bias", _P),
        ("has_memory", _P), ("slots", ctypes.c_int), ("capacity", ctypes.c_int),
        ("store", _P), ("history", _P), ("new_history", _P), ("cross_kt", _P),
        ("cross_v", _P), ("mem_kt", _P), ("mem_v", _P), ("best_lp", _P), ("best_ids", _P),
        ("eos_lp", _P), ("gate", _P), ("src_len", _P), ("mem_len", _P), ("sentence_of", _P),
    ]  # fmt: skip


class _RepeatTables(ctypes.Structure):
    _fields_ = [
        ("max_n", ctypes.c_int), ("member_width", ctypes.c_int), ("canon", _P), ("words", _P),
        ("gaps", _P), ("stops", _P), ("wordy", _P), ("members", _P), ("free", _P),
    ]  # fmt: skip


class _BeamIO(ctypes.Structure):
    _fields_ = [
        ("beams", ctypes.c_int), ("n_best", ctypes.c_int), ("threads", ctypes.c_int),
        ("parallel_rows", ctypes.c_int), ("pad", ctypes.c_int), ("bos", ctypes.c_int),
        ("length_penalty", ctypes.c_double), ("limits", _P),
        ("repeats", ctypes.POINTER(_RepeatTables)), ("out_width", ctypes.c_int),
        ("out_tokens", _P), ("out_lengths", _P), ("out_gates", _P),
    ]  # fmt: skip


_ERRORS = {
    1: "rows must be a positive multiple of the sentences",
    2: "position beyond the model's position table",
    3: "n best must be between 1 and the vocabulary",
    4: "a token id outside the vocabulary",
    5: "an order entry outside the past rows",
    6: "the heads' width must be a multiple of 16, at most 256",
    7: "more rows or positions than the keys/values store holds",
    8: "a history entry outside the store's slots",
    9: "a sentence's key count outside its keys",
    10: "a sentence index outside the sentences",
    11: "a negative length limit",
    12: "the output is narrower than the longest length limit",
    13: "a repeat table's token id outside the vocabulary",
    14: "an empty batch",
    15: "keys or values beyond half precision's range (65,504)",
    16: "a neighbour has a target but an empty source",
}


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def _cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragmt" / "native"


def _arch(arch: str | None) -> str:
    return arch or os.environ.get(ARCH_ENV) or "native"


def _build(compiler: str, arch: str | None = None) -> Path:
    """The library for this source, compiler, `-march` and CPU: built once, then found in the
    cache."""
    flags = (*FLAGS, f"-march={_arch(arch)}")
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=True
    ).stdout
    h = hashlib.sha256(SOURCE.read_bytes())
    for part in (*flags, version, " ".join(sorted(ort_decoder._cpu_flags()))):
        h.update(part.encode())
    out = _cache_dir() / f"step-{h.hexdigest()[:16]}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # built beside its final name and moved there whole: a reader never loads half a library
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, *flags, "-o", tmp, str(SOURCE)], capture_output=True, text=True
        )
        if done.returncode:
            raise RuntimeError(f"{compiler} failed on {SOURCE.name}: {done.stderr.strip()[-800:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def library(arch: str | None = None) -> Any:
    """The compiled step library for `arch` (`ARCH_ENV`; built on first use); RuntimeError
    saying why if it cannot be."""
    arch = _arch(arch)
    with _lock:
        loaded = _loaded.get(arch)
        if isinstance(loaded, str):
            raise RuntimeError(loaded)
        if loaded is not None:
            return loaded
        try:
            compiler = _compiler()
            if compiler is None:
                raise RuntimeError("no C++ compiler (g++ or c++ on PATH, or CXX)")
            lib = ctypes.CDLL(str(_build(compiler, arch)))
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            _loaded[arch] = f"native decoding step unavailable: {e}"
            raise RuntimeError(_loaded[arch]) from e
        lib.ragmt_step.argtypes = [ctypes.POINTER(_Model), ctypes.POINTER(_StepIO)]
        lib.ragmt_step.restype = ctypes.c_int
        lib.ragmt_qlinear.argtypes = [ctypes.POINTER(_QLinear), _P, ctypes.c_int, _P]
        lib.ragmt_qlinear.restype = None
        lib.ragmt_beam_search.argtypes = [
            ctypes.POINTER(_Model),
            ctypes.POINTER(_StepIO),
            ctypes.POINTER(_BeamIO),
        ]
        lib.ragmt_beam_search.restype = ctypes.c_int
        lib.ragmt_repeat_bans.argtypes = [
            ctypes.POINTER(_RepeatTables),
            _P,
            ctypes.c_int,
            ctypes.c_int,
            _P,
            ctypes.c_int,
        ]
        lib.ragmt_repeat_bans.restype = ctypes.c_int
        lib.ragmt_encode.argtypes = [ctypes.POINTER(_Encoder), ctypes.POINTER(_EncodeIO)]
        lib.ragmt_encode.restype = ctypes.c_int
        lib.ragmt_keys_values.argtypes = [ctypes.POINTER(_KeysValues), ctypes.POINTER(_ProjectIO)]
        lib.ragmt_keys_values.restype = ctypes.c_int
        lib.ragmt_encode_memory.argtypes = [
            ctypes.POINTER(_MemoryEncoder),
            ctypes.POINTER(_MemoryIO),
        ]
        lib.ragmt_encode_memory.restype = ctypes.c_int
        lib.ragmt_counts.argtypes = [_P]
        lib.ragmt_counts.restype = None
        _loaded[arch] = lib
        return lib


def available(arch: str | None = None) -> tuple[bool, str]:
    """Whether the native step can run here, and if not why."""
    try:
        library(arch)
    except RuntimeError as e:
        return False, str(e)
    return True, ""


def weight_limit(arch: str | None = None) -> int:
    """The largest int8 weight this build sums exactly: 127, or 64 on AVX2 without VNNI."""
    return int(library(arch).ragmt_weight_limit())


def version() -> str:
    """The native library's source, as a short digest: its outputs change with it, so a
    translation cache shared by replicas keys on it (a rolling update runs two at once)."""
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]


def counts(arch: str | None = None) -> tuple[int, int]:
    """Multiply-adds the library has done since it was loaded: (weight products, attention)."""
    out = np.zeros(2, dtype=np.uint64)
    library(arch).ragmt_counts(_ptr(out))
    return int(out[0]), int(out[1])


def isa(arch: str | None = None) -> str:
    """The instructions the int8 products use: "avx512-vnni", "avx2" or "portable"."""
    return ("portable", "avx2", "avx512-vnni")[int(library(arch).ragmt_isa())]


def _f32(t: Any) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return np.ascontiguousarray(t, dtype=np.float32)
    return np.ascontiguousarray(t.detach().float().cpu().numpy(), dtype=np.float32)


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


class Int8Linear:
    """A linear layer's weights `(n, k)` as the native step multiplies them: int8 per output
    channel within +-`limit`, padded to (16, 4) multiples and packed for its kernels.
    Calling it runs the layer alone (`ragmt_qlinear`): how the tests check the kernels."""

    def __init__(
        self, weight: np.ndarray, bias: np.ndarray | None, limit: int, arch: str | None = None
    ) -> None:
        self.arch = arch
        n, k = weight.shape
        n_pad, k_pad = -(-n // 16) * 16, -(-k // 4) * 4
        top = np.abs(weight).max(axis=1)
        self.scale = np.ones(n_pad, dtype=np.float32)
        self.scale[:n] = np.where(top > 0, top / limit, 1.0)
        self.weights = np.zeros((n_pad, k_pad), dtype=np.int8)  # unpacked, for the tests
        q = np.rint(weight / self.scale[:n, None])
        self.weights[:n, :k] = np.clip(q, -limit, limit)
        self.packed = self.weights.reshape(n_pad // 16, 16, k_pad // 4, 4).transpose(0, 2, 1, 3)
        self.packed = np.ascontiguousarray(self.packed)
        self.wsum = self.weights.sum(axis=1, dtype=np.int32)
        self.bias = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
        self.struct = _QLinear(
            n=n, k=k, np=n_pad, kp=k_pad, w=_ptr(self.packed), scale=_ptr(self.scale),
            wsum=_ptr(self.wsum), bias=None if self.bias is None else _ptr(self.bias),
        )  # fmt: skip

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.struct.k:
            raise ValueError(f"expected rows of {self.struct.k} inputs, got shape {x.shape}")
        y = np.empty((x.shape[0], self.struct.n), dtype=np.float32)
        library(self.arch).ragmt_qlinear(ctypes.byref(self.struct), _ptr(x), x.shape[0], _ptr(y))
        return y


def supports(model: nn.Module) -> tuple[bool, str]:
    """Whether the native step can run `model` (and if not why): an architecture that
    `models.ort_decoder` exports a step for, heads a multiple of 16 wide (up to 256), and a
    library built here."""
    if not ort_decoder.supports(model):
        return False, f"no decoding step for {type(model).__name__}"
    d_head = model.decoder_layers[0].self_attn.d_head
    if d_head % 16 or d_head > 256:
        return False, f"heads {d_head} wide; the native step needs a multiple of 16 up to 256"
    return available()


class _Weights:
    """A model's weights as the native library reads them (int8 products, float norms), and
    every array its structs point into, held."""

    def __init__(self, arch: str) -> None:
        self.arch, self.limit = arch, weight_limit(arch)
        self.keep: list[Any] = []

    def hold(self, a: np.ndarray) -> np.ndarray:
        self.keep.append(a)
        return a

    def norm(self, norm: nn.LayerNorm) -> _Norm:
        if abs(norm.eps - 1e-5) > 1e-12:
            raise ValueError(
                f"the native library's layer norm has eps 1e-5, the model's {norm.eps}"
            )
        return _Norm(_ptr(self.hold(_f32(norm.weight))), _ptr(self.hold(_f32(norm.bias))))

    def linear(self, weight: Any, bias: Any) -> _QLinear:
        b = None if bias is None else _f32(bias)
        layer = Int8Linear(_f32(weight), b, self.limit, self.arch)
        self.keep.append(layer)
        return layer.struct

    def stacked(self, linears: list[nn.Linear]) -> _QLinear:
        return self.linear(
            np.concatenate([_f32(x.weight) for x in linears]),
            np.concatenate([_f32(x.bias) for x in linears]),
        )


class NativeStep:
    """`_StepGraph`'s computation for `model`'s weights, run as one C++ call (`step`), for the
    library built for `arch` (`ARCH_ENV`). `memory`: the memory model's step (source and
    memory mixed by the gate)."""

    def __init__(self, model: nn.Module, memory: bool, arch: str | None = None) -> None:
        self.arch = _arch(arch)
        self.lib = library(self.arch)
        self.memory = memory
        self._w = w = _Weights(self.arch)
        layers = model.decoder_layers
        first = layers[0].self_attn
        self.n_layers, self.heads, self.d_head = len(layers), first.n_heads, first.d_head
        c = model.config
        positions = w.hold(_f32(ort_decoder._position_table(model.positions)))
        built = (_Layer * len(layers))(*[self._layer(layer) for layer in layers])
        self._layers = built
        self.model = _Model(
            d=c.d_model, heads=self.heads, d_head=self.d_head, vocab=c.vocab_size,
            n_layers=len(layers), memory=int(memory), eos=c.eos_id,
            max_positions=positions.shape[0], embed_scale=float(model.embed_scale),
            embed=_ptr(w.hold(_f32(model.embed.weight))), positions=_ptr(positions),
            layers=built, final_norm=w.norm(model.decoder_norm),
            output=w.linear(model.output.weight, None),
        )  # fmt: skip
        self.eos, self.vocab = c.eos_id, c.vocab_size

    def _layer(self, layer: nn.Module) -> _Layer:
        a, c, w = layer.self_attn, layer.cross_attn, self._w
        out = _Layer(
            self_norm=w.norm(layer.self_attn_norm),
            cross_norm=w.norm(layer.cross_attn_norm),
            ffn_norm=w.norm(layer.ffn_norm),
            qkv=w.stacked([a.q_proj, a.k_proj, a.v_proj]),
            self_out=w.linear(a.out_proj.weight, a.out_proj.bias),
            cross_out=w.linear(c.out_proj.weight, c.out_proj.bias),
            fc1=w.linear(layer.ffn.fc1.weight, layer.ffn.fc1.bias),
            fc2=w.linear(layer.ffn.fc2.weight, layer.ffn.fc2.bias),
        )
        if self.memory:
            r = layer.memory_attn
            out.cross_q = w.stacked([c.q_proj, r.q_proj])
            out.memory_out = w.linear(r.out_proj.weight, r.out_proj.bias)
            out.gate_source = _ptr(w.hold(_f32(layer.gate_source.weight).reshape(-1)))
            out.gate_source_bias = float(layer.gate_source.bias.item())
            out.gate_memory = _ptr(w.hold(_f32(layer.gate_memory.weight).reshape(-1)))
        else:
            out.cross_q = w.stacked([c.q_proj])
        return out

    def step(
        self,
        tokens: np.ndarray,
        position: int,
        order: np.ndarray,
        ban: np.ndarray,
        n_best: int,
        sentences: SentenceTensors,
        past: SelfAttentionCache | None,
        threads: int = 1,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, SelfAttentionCache, np.ndarray | None]:
        """One step for `tokens (B,)`, as `_StepGraph`: each row's `n_best` log-probs and tokens
        `(B, n_best)`, EOS log-probs `(B,)`, the keys/values so far (`past` extended, or a new
        store at the first step), and with a memory the gate averaged over layers `(B, 1)`.
        `order (B,)`: the row of the last step each row continues; `ban (B, J)`: tokens a row
        may not emit; `sentences`: the per-sentence tensors; `threads`: at most this many,
        each running the step for its share of the sentences."""
        rows = len(tokens)
        if past is None:
            past = SelfAttentionCache(self, rows)
        past.make_room(rows)
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        order = np.ascontiguousarray(order, dtype=np.int64)
        ban = np.ascontiguousarray(ban, dtype=np.int64)
        if len(order) != rows or ban.shape[0] != rows:
            raise ValueError("native step: order and ban do not fit the rows")
        new_history = np.empty((rows, past.capacity), dtype=np.int32)
        best_lp = np.empty((rows, n_best), dtype=np.float32)
        best_ids = np.empty((rows, n_best), dtype=np.int64)
        eos_lp = np.empty(rows, dtype=np.float32)
        t = sentences
        io = _StepIO.from_buffer_copy(t.fields)  # the per-sentence fields, set once per sentence
        io.rows, io.past_rows, io.past = rows, past.history.shape[0], past.length
        io.n_best, io.n_ban, io.position, io.threads = n_best, ban.shape[1], position, threads
        io.tokens, io.order, io.ban = _ptr(tokens), _ptr(order), _ptr(ban)
        io.slots, io.capacity, io.store = past.store.shape[1], past.capacity, _ptr(past.store)
        io.history, io.new_history = _ptr(past.history), _ptr(new_history)
        io.best_lp, io.best_ids, io.eos_lp = _ptr(best_lp), _ptr(best_ids), _ptr(eos_lp)
        gate = None
        if self.memory:
            if t.mem_kt is None:
                raise ValueError("native step: the memory model's step needs a memory")
            gate = np.empty((rows, 1), dtype=np.float32)
            io.gate = _ptr(gate)
        status = self.lib.ragmt_step(ctypes.byref(self.model), ctypes.byref(io))
        if status:
            raise ValueError(f"native step refused its input: {_ERRORS.get(status, status)}")
        past.history, past.length = new_history, past.length + 1
        return best_lp, best_ids, eos_lp, past, gate

    def beam_search(
        self,
        sentences: SentenceTensors,
        limits: np.ndarray,
        beams: int,
        length_penalty: float,
        special: tuple[int, int],
        repeats: Any = None,
        threads: int = 1,
        parallel_rows: int = 64,
    ) -> tuple[list[list[int]], np.ndarray]:
        """`models.decoding.beam_search` over this step, the whole search one C++ call: the
        same candidates, ties and order, so the same hypotheses, without Python's bookkeeping
        between steps. `limits (G,)`: each sentence's most tokens before EOS is forced;
        `special`: (pad, BOS) ids, never emitted; `repeats`: a `models.decoding.RepeatBan`
        for these sentences (None: repeats allowed); `threads` for a step of at least
        `parallel_rows` rows. Returns each sentence's best hypothesis and its mean gate (NaN
        without a memory)."""
        groups = sentences.fields.groups
        limits = np.ascontiguousarray(limits, dtype=np.int32)
        if limits.shape != (groups,):
            raise ValueError(f"native beam search: {limits.shape} limits for {groups} sentences")
        if self.memory and sentences.mem_kt is None:
            raise ValueError("native step: the memory model's step needs a memory")
        width = max(1, int(limits.max(initial=0)))
        tokens = np.empty((groups, width), dtype=np.int64)
        lengths = np.empty(groups, dtype=np.int32)
        gates = np.empty(groups, dtype=np.float64)
        io = _BeamIO(
            beams=beams, n_best=min(2 * beams, self.vocab), threads=threads,
            parallel_rows=parallel_rows, pad=special[0], bos=special[1],
            length_penalty=length_penalty, limits=_ptr(limits), out_width=width,
            out_tokens=_ptr(tokens), out_lengths=_ptr(lengths), out_gates=_ptr(gates),
        )  # fmt: skip
        tables = None
        if repeats is not None:
            tables = RepeatTables(repeats, self.vocab)
            if tables.free.shape != (groups, 2):
                raise ValueError("native beam search: the repeat ban does not fit the batch")
            io.repeats = ctypes.pointer(tables.struct)
        fields = _StepIO.from_buffer_copy(sentences.fields)
        status = self.lib.ragmt_beam_search(ctypes.byref(self.model), ctypes.byref(fields), io)
        del tables  # held until the call returns
        if status:
            raise ValueError(f"native beam search refused its input: {_ERRORS.get(status, status)}")
        return [tokens[g, : lengths[g]].tolist() for g in range(groups)], gates


class NativeEncoder:
    """A model's source encoder layers (what `models.ort_decoder`'s encoder graph computes:
    the layers, not the final norm) as one C++ call, with the step's int8 products. At batch 1
    the graph's hundred-odd operators cost ONNX Runtime half a millisecond for a few tokens
    whose arithmetic takes a tenth of that."""

    def __init__(self, model: nn.Module, arch: str | None = None) -> None:
        self.arch = _arch(arch)
        self.lib = library(self.arch)
        self._w = p = _Weights(self.arch)
        layers = model.encoder_layers
        first = layers[0].self_attn
        self.d_model, self.heads, self.d_head = model.config.d_model, first.n_heads, first.d_head
        if self.d_head % 16 or self.d_head > 256:
            raise ValueError(f"native encoder: heads {self.d_head} wide, not a multiple of 16")
        built = [
            _EncoderLayer(
                self_norm=p.norm(layer.self_attn_norm), ffn_norm=p.norm(layer.ffn_norm),
                qkv=p.stacked([layer.self_attn.q_proj, layer.self_attn.k_proj,
                               layer.self_attn.v_proj]),
                self_out=p.linear(layer.self_attn.out_proj.weight, layer.self_attn.out_proj.bias),
                fc1=p.linear(layer.ffn.fc1.weight, layer.ffn.fc1.bias),
                fc2=p.linear(layer.ffn.fc2.weight, layer.ffn.fc2.bias),
            )
            for layer in layers
        ]  # fmt: skip
        self._layers = (_EncoderLayer * len(built))(*built)
        self.encoder = _Encoder(
            d=self.d_model, heads=self.heads, d_head=self.d_head, n_layers=len(built),
            layers=self._layers,
        )  # fmt: skip

    def __call__(self, x: np.ndarray, pad: np.ndarray, threads: int = 1) -> np.ndarray:
        """The layers' output `(B, S, D)` for embedded sentences `x` `(B, S, D)`, right-padded
        (`pad` `(B, S)` True at padding, after each sentence's tokens)."""
        out = np.array(x, dtype=np.float32, order="C")  # computed in place
        if out.ndim != 3 or out.shape[2] != self.d_model or pad.shape != out.shape[:2]:
            raise ValueError(f"native encoder: x {out.shape} and padding {pad.shape} do not fit")
        lengths = _real_first(~pad, "native encoder: padding must follow each sentence's tokens")
        io = _EncodeIO(
            batch=out.shape[0], len=out.shape[1], threads=threads, x=_ptr(out),
            lengths=_ptr(lengths),
        )  # fmt: skip
        status = self.lib.ragmt_encode(ctypes.byref(self.encoder), ctypes.byref(io))
        if status:
            raise ValueError(f"native encoder refused its input: {_ERRORS.get(status, status)}")
        return out


def _real_first(real: np.ndarray, refusal: str) -> np.ndarray:
    """Each row's count of real positions `(...)` int32 from `real` `(..., L)`, which must
    hold them first and the padding after (the library reads a row's first ones only);
    ValueError(`refusal`) otherwise."""
    counts = real.sum(axis=-1, dtype=np.int32)
    if not np.array_equal(real, np.arange(real.shape[-1]) < counts[..., None]):
        raise ValueError(refusal)
    return counts


class NativeMemoryEncoder:
    """A memory model's `MemoryEncoder` ("cstm", "ctm" or "tm") as one C++ call on each
    sentence's retrieved pairs, embedding included, which returns the memory packed as the
    decoder reads it (`SemiParametricModel.encode`'s `_pack`): each sentence's present
    targets one after the other, in slot order. It computes real tokens only, with the step's
    int8 products."""

    def __init__(self, model: nn.Module, arch: str | None = None) -> None:
        self.arch = _arch(arch)
        self.lib = library(self.arch)
        self._w = w = _Weights(self.arch)
        e = model.memory_encoder
        c = model.config
        first = e.target_layers[0].self_attn
        self.d_model, self.pad_id = c.d_model, c.pad_id
        self.uses_sources = e.uses_sources
        positions = w.hold(_f32(ort_decoder._position_table(model.positions)))
        sources = [self._layer(layer) for layer in e.source_layers or []]
        targets = [self._layer(layer) for layer in e.target_layers]
        self._layers = (
            (_MemoryLayer * max(len(sources), 1))(*sources),
            (_MemoryLayer * len(targets))(*targets),
        )
        self.fields = _MemoryEncoder(
            d=c.d_model, heads=first.n_heads, d_head=first.d_head, vocab=c.vocab_size,
            max_positions=positions.shape[0], n_source=len(sources), n_target=len(targets),
            conditioned=int(e.conditioned), embed_scale=float(model.embed_scale),
            embed=_ptr(w.hold(_f32(model.embed.weight))), positions=_ptr(positions),
            source_layers=self._layers[0],
            source_norm=w.norm(e.source_norm) if e.source_norm is not None else _Norm(),
            target_layers=self._layers[1], norm=w.norm(e.norm),
        )  # fmt: skip

    def _layer(self, layer: nn.Module) -> _MemoryLayer:
        w, a = self._w, layer.self_attn
        out = _MemoryLayer(
            self_norm=w.norm(layer.self_attn_norm), ffn_norm=w.norm(layer.ffn_norm),
            qkv=w.stacked([a.q_proj, a.k_proj, a.v_proj]),
            self_out=w.linear(a.out_proj.weight, a.out_proj.bias),
            fc1=w.linear(layer.ffn.fc1.weight, layer.ffn.fc1.bias),
            fc2=w.linear(layer.ffn.fc2.weight, layer.ffn.fc2.bias),
        )  # fmt: skip
        if hasattr(layer, "cross_attn"):
            c = layer.cross_attn
            out.cross_norm = w.norm(layer.cross_attn_norm)
            out.cross_q = w.linear(c.q_proj.weight, c.q_proj.bias)
            out.cross_kv = w.stacked([c.k_proj, c.v_proj])
            out.cross_out = w.linear(c.out_proj.weight, c.out_proj.bias)
        return out

    def __call__(
        self,
        src: np.ndarray,
        tgt: np.ndarray,
        context: np.ndarray,
        context_pad: np.ndarray,
        threads: int = 1,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The packed memory `(B, M, D)` and its padding `(B, M)` for retrieved pairs `src`
        `(B, N, Ls)` and `tgt` `(B, N, Lt)` (int64 ids, right-padded; a slot without target
        tokens is absent) and the sentences' encodings `context` `(B, S, D)`, right-padded
        (`context_pad` `(B, S)`). M is the most target tokens of any sentence."""
        tgt = _c(np.ascontiguousarray(tgt), np.int64)
        src = _c(np.ascontiguousarray(src), np.int64)
        context = _c(np.ascontiguousarray(context))
        b = tgt.shape[0]
        if tgt.ndim != 3 or src.shape[:2] != tgt.shape[:2] or context.shape[0] != b:
            raise ValueError(
                f"native memory encoder: sources {src.shape}, targets {tgt.shape} and "
                f"context {context.shape} do not fit"
            )
        if context.shape[2:] != (self.d_model,) or context_pad.shape != context.shape[:2]:
            raise ValueError(f"native memory encoder: context {context.shape} does not fit")
        refusal = "native memory encoder: the {} must be right-padded"
        tgt_lens = _real_first(tgt != self.pad_id, refusal.format("retrieved targets"))
        src_lens = _real_first(src != self.pad_id, refusal.format("retrieved sources"))
        context_lens = _real_first(~np.asarray(context_pad), refusal.format("sentences"))
        totals = tgt_lens.sum(axis=1)
        width = int(totals.max()) if b else 0
        out = np.empty((b, width, self.d_model), dtype=np.float32)
        pad = np.arange(width) >= totals[:, None]
        if width == 0:
            return out, pad
        io = _MemoryIO(
            sentences=b, slots=tgt.shape[1], src_width=src.shape[2], tgt_width=tgt.shape[2],
            len=context.shape[1], width=width, threads=threads, src=_ptr(src), tgt=_ptr(tgt),
            src_lens=_ptr(src_lens), tgt_lens=_ptr(tgt_lens), context=_ptr(context),
            context_lens=_ptr(context_lens), out=_ptr(out),
        )  # fmt: skip
        status = self.lib.ragmt_encode_memory(ctypes.byref(self.fields), ctypes.byref(io))
        if status:
            raise ValueError(f"native memory encoder refused: {_ERRORS.get(status, status)}")
        return out, pad


class NativeKeysValues:
    """Every decoder layer's keys and values of one attention (`attr`: "cross_attn" or
    "memory_attn") as one C++ call, straight into the halves the native step reads
    (`stack_keys`, `stack_values`), from the states' real rows only: ONNX Runtime's graph
    projected every padded row, in floats, and converting them took as long again."""

    def __init__(self, model: nn.Module, attr: str, arch: str | None = None) -> None:
        self.arch = _arch(arch)
        self.lib = library(self.arch)
        self._w = w = _Weights(self.arch)
        attentions = [getattr(layer, attr) for layer in model.decoder_layers]
        self.heads, self.d_head = attentions[0].n_heads, attentions[0].d_head
        self.d_model = model.config.d_model
        built = [w.stacked([a.k_proj, a.v_proj]) for a in attentions]
        self._kv = (_QLinear * len(built))(*built)
        self.fields = _KeysValues(
            d=self.d_model, heads=self.heads, d_head=self.d_head, n_layers=len(built),
            kv=self._kv,
        )  # fmt: skip

    def __call__(
        self, x: np.ndarray, pad: np.ndarray, threads: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """Keys `(G, L, H, Dh, S')` and values `(G, L, H, S, Dh)` in half precision for states
        `x` `(G, S, D)`, right-padded (`pad` `(G, S)` True at padding, after the tokens)."""
        x = _c(np.ascontiguousarray(x))
        if x.ndim != 3 or x.shape[2] != self.d_model or pad.shape != x.shape[:2]:
            raise ValueError(f"native keys/values: x {x.shape} and padding {pad.shape} do not fit")
        lens = _real_first(~pad, "native keys/values: padding must follow each sentence's tokens")
        g, s = pad.shape
        ldk = -(-s // 16) * 16
        layers = self.fields.n_layers
        kt = np.empty((g, layers, self.heads, self.d_head, ldk), dtype=np.float16)
        v = np.empty((g, layers, self.heads, s, self.d_head), dtype=np.float16)
        io = _ProjectIO(
            groups=g, len=s, ldk=ldk, threads=threads, x=_ptr(x), lens=_ptr(lens),
            kt=_ptr(kt), v=_ptr(v),
        )  # fmt: skip
        status = self.lib.ragmt_keys_values(ctypes.byref(self.fields), ctypes.byref(io))
        if status:
            raise ValueError(f"native keys/values refused: {_ERRORS.get(status, status)}")
        return kt, v


class RepeatTables:
    """A `models.decoding.RepeatBan`'s tables as the native beam search reads them. Calling
    it gives the tokens a history may not emit next (`ragmt_repeat_bans`): how the tests
    check it against `RepeatBan.banned`."""

    def __init__(self, repeats: Any, vocab: int, arch: str | None = None) -> None:
        self.arch = arch
        self.arrays = {
            name: np.ascontiguousarray(getattr(repeats, name), dtype=dtype)
            for name, dtype in (
                ("canon", np.int64), ("words", np.uint8), ("gaps", np.uint8),
                ("stops", np.uint8), ("wordy", np.uint8), ("members", np.int64),
            )
        }  # fmt: skip
        if any(len(a) != vocab for a in self.arrays.values()):
            raise ValueError(f"native beam search: repeat tables not {vocab} tokens long")
        self.free = np.ascontiguousarray(repeats.free.numpy(), dtype=np.uint8)
        self.struct = _RepeatTables(
            max_n=repeats.max_n, member_width=self.arrays["members"].shape[1],
            free=_ptr(self.free), **{k: _ptr(v) for k, v in self.arrays.items()},
        )  # fmt: skip

    def __call__(self, history: list[int], sentence: int) -> list[int]:
        h = np.ascontiguousarray(history, dtype=np.int64)
        out = np.empty(4096, dtype=np.int64)
        n = library(self.arch).ragmt_repeat_bans(
            ctypes.byref(self.struct), _ptr(h), len(h), sentence, _ptr(out), len(out)
        )
        return out[: min(n, len(out))].tolist()


class SelfAttentionCache:
    """The self-attention keys and values of a decoding call, for the native step: a store
    `(capacity, slots, L, 2, H, Dh)` whose entries never move (position p of the row in slot
    s at step p), and each row's history `(rows, capacity)`: the slot of its ancestor at each
    position. Beam search's reordering and dropping finished sentences then reorder histories
    (ints), not keys and values; the store doubles its positions when full."""

    def __init__(self, step: NativeStep, rows: int, capacity: int = 32) -> None:
        shape = (capacity, rows, step.n_layers, 2, step.heads, step.d_head)
        self.store = np.empty(shape, dtype=np.float32)
        self.history = np.zeros((rows, capacity), dtype=np.int32)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.store.shape[0]

    def make_room(self, rows: int) -> None:
        """Room for one more position of `rows` rows (more slots, or twice the positions)."""
        capacity, slots = self.store.shape[:2]
        if rows <= slots and self.length < capacity:
            return
        more = (2 * capacity if self.length >= capacity else capacity, max(rows, slots))
        store = np.empty(more + self.store.shape[2:], dtype=np.float32)
        store[: self.length, :slots] = self.store[: self.length]
        history = np.zeros((self.history.shape[0], more[0]), dtype=np.int32)
        history[:, : self.length] = self.history[:, : self.length]
        self.store, self.history = store, history


def _c(a: np.ndarray, dtype: type = np.float32) -> np.ndarray:
    if a.dtype != dtype or not a.flags.c_contiguous:
        raise ValueError(f"the native step reads C-contiguous {np.dtype(dtype).name} arrays")
    return a


@dataclass
class SentenceTensors:
    """The per-sentence tensors a native step reads, every layer's stacked (sentences first):
    source bias `(G, S)`, keys transposed and padded `(G, L, H, Dh, S')` and values `(G, L, H,
    S, Dh)` in half precision (`stack_keys`, `stack_values`), and with a memory the same for
    it, plus which sentences have one `(G,)`. Each
    sentence's keys must come first, its padding after them (0 and a mask below 0 in the
    bias): the step reads a sentence's own keys only."""

    src_bias: np.ndarray
    cross_kt: np.ndarray
    cross_v: np.ndarray
    mem_bias: np.ndarray | None = None
    has_memory: np.ndarray | None = None
    mem_kt: np.ndarray | None = None
    mem_v: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in (
            "src_bias",
            "cross_kt",
            "cross_v",
            "mem_bias",
            "has_memory",
            "mem_kt",
            "mem_v",
        ):
            if getattr(self, name) is not None:
                _c(getattr(self, name), np.float16 if name[-2:] in ("kt", "_v") else np.float32)
        g, s = self.src_bias.shape
        ldk = -(-s // 16) * 16
        if self.cross_kt.shape[::4] != (g, ldk) or self.cross_v.shape[::3] != (g, s):
            raise ValueError("native step: the source's keys/values do not fit its bias")
        self.src_len = _key_counts(self.src_bias, "source")
        self.fields = _StepIO(
            groups=g, src=s, ldk_src=ldk, src_bias=_ptr(self.src_bias),
            cross_kt=_ptr(self.cross_kt), cross_v=_ptr(self.cross_v), src_len=_ptr(self.src_len),
        )  # fmt: skip
        if self.mem_kt is not None:
            if self.mem_bias is None or self.mem_v is None or self.has_memory is None:
                raise ValueError("native step: a memory needs its bias, values and has_memory")
            m = self.mem_bias.shape[1]
            fits = self.mem_kt.shape[::4] == (g, -(-m // 16) * 16)
            if not fits or self.mem_v.shape[::3] != (g, m) or self.has_memory.shape != (g,):
                raise ValueError("native step: the memory's keys/values do not fit its bias")
            self.mem_len = _key_counts(self.mem_bias, "memory")
            f = self.fields
            f.mem, f.ldk_mem, f.mem_len = m, self.mem_kt.shape[-1], _ptr(self.mem_len)
            f.mem_bias, f.has_memory = _ptr(self.mem_bias), _ptr(self.has_memory)
            f.mem_kt, f.mem_v = _ptr(self.mem_kt), _ptr(self.mem_v)


def _key_counts(bias: np.ndarray, what: str) -> np.ndarray:
    """Each sentence's keys `(G,)` int32 from its bias `(G, S)`: 0 on its keys, which come
    first, and a mask (below 0) on the padding after them."""
    refusal = f"native step: the {what} bias is not keys first, then padding"
    counts = _real_first(bias == 0, refusal)
    if np.any(bias > 0):
        raise ValueError(refusal)
    return counts


def _halves(per_layer: list[np.ndarray], out: torch.Tensor) -> np.ndarray:
    """`out` as NumPy, checked: every key or value of `per_layer` fits half precision."""
    for a in per_layer:
        low, high = torch.aminmax(torch.from_numpy(a))
        if max(-float(low), float(high)) > HALF_MAX:
            raise ValueError("native step: keys or values beyond half precision's range (65,504)")
    return out.numpy()


# The stacking below converts with PyTorch: NumPy's float32 -> float16 cast is not vectorized
# and took longer than a batch's decoding steps.


def stack_keys(per_layer: list[np.ndarray]) -> np.ndarray:
    """Each layer's keys `(G, H, S, Dh)` as the native step reads them: `(G, L, H, Dh, S')`
    in half precision (a wide batch's keys are read from main memory at every step, and
    halves are half the reading), S' = S rounded up to a multiple of 16 with zero keys
    (their scores are never read)."""
    g, h, s, dh = per_layer[0].shape
    out = torch.zeros((g, len(per_layer), h, dh, -(-s // 16) * 16), dtype=torch.float16)
    for i, k in enumerate(per_layer):
        out[:, i, :, :, :s] = torch.from_numpy(k).transpose(2, 3)
    return _halves(per_layer, out)


def stack_values(per_layer: list[np.ndarray]) -> np.ndarray:
    """Each layer's values `(G, H, S, Dh)` stacked as `(G, L, H, S, Dh)`, in half precision."""
    g, h, s, dh = per_layer[0].shape
    out = torch.empty((g, len(per_layer), h, s, dh), dtype=torch.float16)
    for i, v in enumerate(per_layer):
        out[:, i] = torch.from_numpy(v)
    return _halves(per_layer, out)
