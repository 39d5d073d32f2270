"""A ragmt Transformer bundle as a CTranslate2 model, decoded with ragmt's tokenizer and limits.

CTranslate2 is the CPU engine ragmt's decoding speed is compared with; the comparison means
something only if both produce the same translations, so the conversion copies every weight
(positions included: ragmt interleaves sine and cosine, CTranslate2's own table does not) and
`CT2Translator` reproduces ragmt's source ids, length limits and banned tokens.

    python -m benchmarks.ctranslate2_model                     # convert the baseline, compare
    python -m benchmarks.ctranslate2_model --sentences 500 --quantization int8

Greedy search matches ragmt's. Beam search needs two corrections: CTranslate2's
`length_penalty` divides by len**lp (EOS not counted) where ragmt uses GNMT's
((5 + len) / 6)**lp (EOS counted), so `normalization="gnmt"` takes CTranslate2's K finished
hypotheses with raw scores and ranks them by ragmt's formula; and at the length limit ragmt
forces EOS and counts its log-prob while CTranslate2 just stops, so a hypothesis cut there gets
that log-prob from `score_batch`. What remains: at the limit CTranslate2 keeps its K best
candidates, where ragmt also ends the ones that replace candidates ending in EOS; and the two
engines' float rounding (about 1e-3 on a sentence's score) breaks near-ties differently.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import ctranslate2
import numpy as np
import torch
from ctranslate2.specs import common_spec, transformer_spec
from torch import Tensor, nn

from models.artifacts import atomic_directory, read_manifest, write_manifest
from models.bundle import load_bundle, model_card
from models.layers import DecoderLayer, EncoderLayer, MultiHeadAttention
from models.tokenizer import BOS_ID, PAD_ID, UNK_ID, Tokenizer
from models.transformer import Transformer
from models.translator import BASELINE_BUNDLE, DecodeOptions

__all__ = ["KIND", "CT2Translator", "convert", "length_limit", "translate"]

KIND = "ctranslate2-model"
FORMAT_VERSION = 1
SPM_FILE = "spm.model"
# CTranslate2 stops a sentence at K finished hypotheses (ragmt's rule) only when some length
# penalty is set; x ** 1e-30 is 1.0 in float32, so the scores it returns stay raw log-probs.
_RAW_SCORES = 1e-30

Normalization = Literal["gnmt", "ctranslate2"]


def _array(t: Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().numpy().copy()


def _linear(spec: common_spec.LinearSpec, *layers: nn.Linear) -> None:
    """One CTranslate2 linear from one or more torch linears fused along the output dim
    (CTranslate2 projects q, k, v of self-attention, and k, v of cross-attention, at once)."""
    spec.weight = np.concatenate([_array(m.weight) for m in layers])
    if all(m.bias is not None for m in layers):
        spec.bias = np.concatenate([_array(m.bias) for m in layers])
    elif any(m.bias is not None for m in layers):
        raise ValueError("fused linears must all have a bias or none")


def _norm(spec: common_spec.LayerNormSpec, norm: nn.LayerNorm) -> None:
    if norm.eps != 1e-5:
        raise ValueError(f"layer norm epsilon {norm.eps}; the converted config assumes 1e-5")
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _attention(spec: Any, attn: MultiHeadAttention, norm: nn.LayerNorm, cross: bool) -> None:
    _norm(spec.layer_norm, norm)
    if cross:
        _linear(spec.linear[0], attn.q_proj)
        _linear(spec.linear[1], attn.k_proj, attn.v_proj)
    else:
        _linear(spec.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)
    _linear(spec.linear[-1], attn.out_proj)


def _ffn(spec: Any, layer: EncoderLayer | DecoderLayer) -> None:
    _norm(spec.layer_norm, layer.ffn_norm)
    _linear(spec.linear_0, layer.ffn.fc1)
    _linear(spec.linear_1, layer.ffn.fc2)


def _spec(model: Transformer, pieces: list[str]) -> transformer_spec.TransformerSpec:
    """The TransformerSpec of `model`: pre-norm layers with a final norm on each side, ReLU,
    embeddings scaled by sqrt(d), one embedding shared by encoder, decoder and (when tied) the
    output projection, and the model's own position table written out row by row."""
    c = model.config
    spec = transformer_spec.TransformerSpec.from_config(
        (c.enc_layers, c.dec_layers),
        c.n_heads,
        pre_norm=True,
        activation=common_spec.Activation.RELU,
    )
    positions = _array(model.positions(c.max_len))  # (max_len, D), what `_embed` adds
    embed = _array(model.embed.weight)  # (V, D)
    sides = (
        (spec.encoder, spec.encoder.embeddings[0], model.encoder_norm),
        (spec.decoder, spec.decoder.embeddings, model.decoder_norm),
    )
    for side, embeddings, final_norm in sides:
        embeddings.weight = embed
        side.scale_embeddings = True  # x * sqrt(d), as Transformer._embed
        side.position_encodings.encodings = positions
        _norm(side.layer_norm, final_norm)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, cross=False)
        _ffn(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, cross=False)
        _attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_norm, cross=True)
        _ffn(layer_spec.ffn, layer)
    _linear(spec.decoder.projection, model.output)

    # CTranslate2 names its special tokens; they must be the pieces at the model's ids.
    spec.config.unk_token = pieces[UNK_ID]
    spec.config.bos_token = pieces[c.bos_id]
    spec.config.eos_token = pieces[c.eos_id]
    spec.config.decoder_start_token = pieces[c.bos_id]  # position 0 is BOS, as in ragmt
    spec.config.layer_norm_epsilon = 1e-5  # torch's default; CTranslate2 would take 1e-6
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    return spec


def convert(bundle: Path, out: Path, quantization: str | None = None) -> Path:
    """Write the CTranslate2 model of the Transformer bundle `bundle` to `out` (replacing one
    there, atomically); `quantization` is CTranslate2's weight type ("int8", "float16", ...;
    None keeps float32). Returns `out`."""
    bundle, out = Path(bundle), Path(out)
    loaded = load_bundle(bundle)
    model = loaded.model
    if type(model) is not Transformer:
        raise ValueError(
            f"{bundle}: architecture {loaded.manifest['architecture']!r}; only the plain "
            "Transformer has a CTranslate2 counterpart"
        )
    card = model_card(loaded.manifest, bundle)
    if card.tokenizer != "sentencepiece" or card.tokenizer_file is None:
        raise ValueError(f"{bundle}: tokenizer {card.tokenizer!r}; a SentencePiece one is needed")
    spm_path = loaded.file(card.tokenizer_file)
    tok = Tokenizer(spm_path)  # checks pad=0 bos=1 eos=2 unk=3
    c = model.config
    if (c.pad_id, c.bos_id, c.eos_id) != (0, 1, 2) or tok.vocab_size != c.vocab_size:
        raise ValueError(
            f"{bundle}: model ids pad/bos/eos {c.pad_id}/{c.bos_id}/{c.eos_id} and vocabulary "
            f"{c.vocab_size} do not match its SentencePiece model ({tok.vocab_size} pieces)"
        )
    pieces = [tok.sp.id_to_piece(i) for i in range(tok.vocab_size)]
    if len(set(pieces)) != len(pieces):
        raise ValueError(f"{spm_path}: repeated pieces; CTranslate2 looks tokens up by name")

    with torch.inference_mode():
        spec = _spec(model, pieces)
    spec.register_file(str(spm_path), SPM_FILE)
    spec.validate()
    spec.optimize(quantization=quantization)
    source, target = card.pairs[0]
    with atomic_directory(out) as tmp:
        spec.save(str(tmp))
        write_manifest(
            tmp,
            {
                "kind": KIND,
                "format_version": FORMAT_VERSION,
                "languages": {"source": source, "target": target},
                "max_len": c.max_len,
                "quantization": quantization or "float32",
                "ctranslate2": ctranslate2.__version__,
                "built_from": {
                    "bundle": bundle.resolve().name,
                    "files": loaded.manifest["files"],
                },
            },
        )
    return out


def length_limit(n_src: int, max_len_a: float, max_len_b: float, max_len: int) -> int:
    """Most tokens before EOS for a source of `n_src` sub-words: `models.decoding`'s rule,
    a*n + b within the max_len-1 target positions after BOS."""
    return max(0, min(math.floor(max_len_a * n_src + max_len_b + 1e-6), max_len - 1))


class CT2Translator:
    """A converted model with ragmt's source ids, length limits and banned tokens.

    `device`/`compute_type`/`intra_threads`/`inter_threads` go to `ctranslate2.Translator`;
    compute_type "default" keeps the type the model was saved in. With `inter_threads` > 1,
    that many batches are decoded at once (CTranslate2's own way to use several cores).
    """

    def __init__(
        self,
        model_dir: Path | str,
        device: str = "cpu",
        compute_type: str = "default",
        intra_threads: int = 1,
        inter_threads: int = 1,
    ) -> None:
        self.model_dir = Path(model_dir)
        manifest = read_manifest(self.model_dir, KIND, FORMAT_VERSION)
        self.source_lang = manifest["languages"]["source"]
        self.max_len = int(manifest["max_len"])
        self.tokenizer = Tokenizer(self.model_dir / SPM_FILE)
        sp = self.tokenizer.sp
        self.pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.translator = ctranslate2.Translator(
            str(self.model_dir),
            device=device,
            compute_type=compute_type,
            inter_threads=inter_threads,
            intra_threads=intra_threads,
        )
        self.inter_threads = inter_threads
        # ragmt never emits pad or BOS (models.decoding._constrain).
        self._banned = [[self.pieces[PAD_ID]], [self.pieces[BOS_ID]]]

    def translate(
        self,
        sentences: Sequence[str],
        beam_size: int = DecodeOptions.beam_size,
        *,
        length_penalty: float = DecodeOptions.length_penalty,
        max_len_a: float = DecodeOptions.max_len_a,
        max_len_b: float = DecodeOptions.max_len_b,
        batch_size: int = DecodeOptions.batch_size,
        normalization: Normalization = "gnmt",
    ) -> list[str]:
        """Translations of `sentences`, in their order, decoded as `Translator.translate` does.

        Batches are sorted by length like ragmt's. Greedy runs each batch to its longest limit
        and cuts each output at its own (a greedy prefix does not depend on the limit); beam
        search batches sentences of one limit, as CTranslate2 takes one limit per call.
        normalization: "gnmt" re-ranks CTranslate2's K finished hypotheses by ragmt's
        ((5 + len + 1) / 6) ** length_penalty; "ctranslate2" uses its len ** length_penalty.
        """
        if normalization not in ("gnmt", "ctranslate2"):
            raise ValueError(
                f"normalization must be 'gnmt' or 'ctranslate2', not {normalization!r}"
            )
        ids = [s[: self.max_len] for s in self.tokenizer.encode_batch(sentences, self.source_lang)]
        limits = [length_limit(len(s), max_len_a, max_len_b, self.max_len) for s in ids]
        order = sorted(
            (i for i in range(len(ids)) if ids[i] and limits[i]), key=lambda i: len(ids[i])
        )
        if beam_size > 1:  # one limit per batch: same-limit runs of the length order
            order.sort(key=lambda i: (limits[i], len(ids[i])))
        batches: list[list[int]] = []
        for i in order:
            last = batches[-1] if batches else None
            if last and len(last) < batch_size and (beam_size == 1 or limits[last[0]] == limits[i]):
                last.append(i)
            else:
                batches.append([i])

        def decode(batch: list[int]) -> list[list[str]]:
            return self._decode(
                [[self.pieces[t] for t in ids[i]] for i in batch],
                max(limits[i] for i in batch),
                beam_size,
                length_penalty,
                normalization,
            )

        out = [""] * len(sentences)

        def put(decoded: Iterable[list[list[str]]]) -> None:
            for batch, hyps in zip(batches, decoded, strict=True):
                for i, hyp in zip(batch, hyps, strict=True):
                    out[i] = self.tokenizer.decode([self.ids[p] for p in hyp[: limits[i]]])

        if self.inter_threads == 1:  # no pool: its start would count in every batch-1 time
            put(map(decode, batches))
        else:  # CTranslate2 releases the GIL: its inter_threads replicas decode at once
            with ThreadPoolExecutor(self.inter_threads) as pool:
                put(pool.map(decode, batches))
        return out

    def _decode(
        self,
        source: list[list[str]],
        limit: int,
        beam_size: int,
        length_penalty: float,
        normalization: Normalization,
    ) -> list[list[str]]:
        """The best hypothesis (pieces, no EOS) of each source, at most `limit` pieces."""
        gnmt = beam_size > 1 and normalization == "gnmt"
        results = self.translator.translate_batch(
            source,
            beam_size=beam_size,
            num_hypotheses=beam_size if gnmt else 1,
            length_penalty=_RAW_SCORES if gnmt else length_penalty,
            return_scores=gnmt,
            suppress_sequences=self._banned,
            max_input_length=0,  # sources were cut at max_len already
            max_decoding_length=limit,
            min_decoding_length=0,  # ragmt allows EOS first
        )
        if not gnmt:
            return [r.hypotheses[0] for r in results]
        scores = [list(r.scores) for r in results]
        # Hypotheses cut at the limit: ragmt forces EOS there and counts its log-prob.
        cut = [(s, j) for s, r in enumerate(results) for j, h in enumerate(r.hypotheses)]
        cut = [(s, j) for s, j in cut if len(results[s].hypotheses[j]) == limit]
        if cut:
            eos = self.translator.score_batch(
                [source[s] for s, _ in cut],
                [results[s].hypotheses[j] for s, j in cut],
                max_input_length=0,
                offset=limit,  # the EOS after the hypothesis only
            )
            for (s, j), e in zip(cut, eos, strict=True):
                scores[s][j] += e.log_probs[-1]
        best = []
        for r, sc in zip(results, scores, strict=True):
            ranked = [
                (score / ((5.0 + len(h) + 1) / 6.0) ** length_penalty, h)
                for score, h in zip(sc, r.hypotheses, strict=True)
            ]
            best.append(max(ranked, key=lambda x: x[0])[1])
        return best


def translate(
    model_dir: Path | str,
    sentences: Sequence[str],
    beam_size: int = DecodeOptions.beam_size,
    **options: Any,
) -> list[str]:
    """`CT2Translator(model_dir).translate(sentences, beam_size, **options)` in one call."""
    return CT2Translator(model_dir).translate(sentences, beam_size, **options)


# --------------------------------------------------------------------------- comparison


def _sentences(n: int, corpus: Path | None) -> tuple[list[str], str]:
    if corpus is not None and corpus.is_file():
        lines = [s for s in corpus.read_text(encoding="utf-8").splitlines() if s.strip()]
        return lines[:n], str(corpus)
    from benchmarks._corpus import repo_sentences

    return repo_sentences()[:n], "benchmarks._corpus.repo_sentences()"


def main() -> None:
    from models.translator import Translator

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bundle", type=Path, default=BASELINE_BUNDLE)
    ap.add_argument("--out", type=Path, default=None, help="converted model (default: a temp dir)")
    ap.add_argument("--quantization", default=None)
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument(
        "--corpus",
        type=Path,
        default=Path("/work/datawork/data/en-de/general/test.en"),
        help="English, one sentence a line (else the repository's own prose)",
    )
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    sentences, source = _sentences(args.sentences, args.corpus)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "ct2"
        t0 = time.perf_counter()
        convert(args.bundle, out, args.quantization)
        print(f"converted {args.bundle} -> {out} in {time.perf_counter() - t0:.1f} s")
        ct2 = CT2Translator(out, intra_threads=args.threads)
        ragmt = Translator.from_bundle(args.bundle)
        print(f"{len(sentences)} sentences from {source}; {args.threads} thread(s) each")
        runs: list[tuple[str, DecodeOptions, dict[str, Any]]] = [
            ("greedy", DecodeOptions(beam_size=1), {}),
            (f"beam {args.beam}, gnmt re-rank", DecodeOptions(beam_size=args.beam), {}),
            (
                f"beam {args.beam}, ct2 len**lp",
                DecodeOptions(beam_size=args.beam),
                {"normalization": "ctranslate2"},
            ),
        ]
        print(f"{'decoding':<28} {'identical':>10} {'ragmt s':>8} {'ct2 s':>7} {'ratio':>6}")
        for name, opts, extra in runs:
            t0 = time.perf_counter()
            want = ragmt.translate(sentences, opts)
            t_ragmt = time.perf_counter() - t0
            t0 = time.perf_counter()
            got = ct2.translate(
                sentences,
                opts.beam_size,
                length_penalty=opts.length_penalty,
                max_len_a=opts.max_len_a,
                max_len_b=opts.max_len_b,
                batch_size=opts.batch_size,
                **extra,
            )
            t_ct2 = time.perf_counter() - t0
            same = [i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a == b]
            print(
                f"{name:<28} {len(same):>4} / {len(sentences):<4} {t_ragmt:>8.1f} {t_ct2:>7.1f} "
                f"{t_ragmt / t_ct2:>5.1f}x"
            )
            for i in sorted(set(range(len(sentences))) - set(same))[:5]:
                print(f"  differs at {i}: {sentences[i]!r}")
                print(f"    ragmt {want[i]!r}\n    ct2   {got[i]!r}")


if __name__ == "__main__":
    main()
