"""Service settings: the one place that reads the environment (variables prefixed `RAGMT_`).

Lists (`RAGMT_API_KEYS`, `RAGMT_REQUIRED_DOMAINS`, `RAGMT_DOMAINS`) are comma-separated.
`RAGMT_API_KEYS_FILE` names a JSON file of scoped client keys (`read_keys_file`), read here
when the settings are validated.
Retrieval stores are read from `stores_dir`, by default ``<data_dir>/stores`` (``data/stores``
relative to the working directory, next to the prepared corpora of ``ragmt data prepare``).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from index_builder.store import DOMAIN_PATTERN, DOMAIN_RE, check_domain
from models import defaults
from models.translator import COMMITTED_BUNDLES, DEFAULT_BUNDLE
from service.registry import bundle_dirs

__all__ = [
    "DOMAIN_PATTERN",
    "DOMAIN_RE",
    "EVERY_DOMAIN",
    "VERSION_PATTERN",
    "VERSION_RE",
    "ApiKeyEntry",
    "Settings",
    "read_keys_file",
]
# Store version ids (index_builder.store names them `<UTC time>Z-<hash>`); never a path.
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
VERSION_RE = re.compile(VERSION_PATTERN)

CommaList = Annotated[list[str], NoDecode]

EVERY_DOMAIN = "*"  # a key file's scope that opens every domain, present and future
GENERAL = "general"  # service.domains.GENERAL_DOMAIN: always served, so always in scope
KEY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class ApiKeyEntry(BaseModel):
    """One client key of RAGMT_API_KEYS_FILE: who holds it, and which domains it opens (to
    translate with, and to read retrieved neighbours from)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=KEY_NAME_PATTERN)
    key: SecretStr  # never printed: errors name the entry by `name`
    translate: list[str] | Literal["*"] = []
    neighbours: list[str] | Literal["*"] = []  # a subset of `translate`
    edit: list[str] | Literal["*"] = []  # may add, correct, delete pairs; within `neighbours`
    metrics: bool = False  # may read /metrics, whose labels name every domain


def _scope_problem(entry: ApiKeyEntry, configured: Sequence[str]) -> str | None:
    """What is wrong with an entry's domains, or None."""
    for what in ("translate", "neighbours", "edit"):
        scope = getattr(entry, what)
        if scope == EVERY_DOMAIN:
            continue
        for domain in scope:
            if not DOMAIN_RE.fullmatch(domain):
                return f"{what}: {domain[:80]!r} is not a domain name"
            if configured and domain not in {*configured, GENERAL}:
                return f"{what}: domain {domain!r} is not among RAGMT_DOMAINS"
    if entry.translate != EVERY_DOMAIN:
        if entry.neighbours == EVERY_DOMAIN:
            return "neighbours: '*' needs translate '*'"
        beyond = sorted(set(entry.neighbours) - set(entry.translate))
        if beyond:
            return f"neighbours: {', '.join(beyond)} not among its translate domains"
    if entry.neighbours != EVERY_DOMAIN:
        if entry.edit == EVERY_DOMAIN:
            return "edit: '*' needs neighbours '*'"
        beyond = sorted(set(entry.edit) - set(entry.neighbours))
        if beyond:
            return f"edit: {', '.join(beyond)} not among its neighbours domains"
    return None


def read_keys_file(
    path: Path, configured: Sequence[str] = (), other_keys: Sequence[str] = ()
) -> list[ApiKeyEntry]:
    """The entries of a keys file, every one checked; a ValueError names the entry that is
    wrong by its name (or position), never by its key. `configured`: RAGMT_DOMAINS (empty:
    any domain name); `other_keys`: RAGMT_API_KEYS and the admin key, which no entry may
    repeat (a key must say who is calling)."""
    where = f"api_keys_file {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: cannot read it ({type(e).__name__})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: expected a non-empty list of key entries")
    entries: list[ApiKeyEntry] = []
    names: set[str] = set()
    owners = {key: "RAGMT_API_KEYS or RAGMT_ADMIN_KEY" for key in other_keys}
    for i, item in enumerate(raw):
        name = item.get("name") if isinstance(item, dict) else None
        label = f"{where}: entry {i + 1}"
        if isinstance(name, str) and re.fullmatch(KEY_NAME_PATTERN, name):
            label += f" ({name!r})"
        if not isinstance(item, dict):
            raise ValueError(f"{label}: expected an object")
        try:
            entry = ApiKeyEntry.model_validate(item)
        except ValidationError as e:  # only where and what: pydantic's input would be the key
            first = e.errors()[0]
            field = str(first["loc"][0])[:80] if first["loc"] else "entry"
            what = first["msg"]
            if field in ("translate", "neighbours"):
                what = "expected a list of domain names, or '*' for every domain"
            raise ValueError(f"{label}: {field}: {what}") from None
        key = entry.key.get_secret_value()
        if not key.strip():
            raise ValueError(f"{label}: key is empty")
        if key != key.strip():
            raise ValueError(f"{label}: key starts or ends with white space")
        if entry.name in names:
            raise ValueError(f"{label}: name {entry.name!r} is used twice")
        if key in owners:
            raise ValueError(f"{label}: its key is also the key of {owners[key]}")
        problem = _scope_problem(entry, configured)
        if problem is not None:
            raise ValueError(f"{label}: {problem}")
        names.add(entry.name)
        owners[key] = f"entry {entry.name!r}"
        entries.append(entry)
    return entries


class Settings(BaseSettings):
    """Everything the service is configured by; `Settings()` reads RAGMT_* variables."""

    model_config = SettingsConfigDict(env_prefix="RAGMT_", extra="ignore", protected_namespaces=())

    # Models and decoding
    model_path: Path | None = None  # None: the committed bundles (memory model first)
    models_dir: Path | None = None  # every bundle directory in it is served too
    # "en-de=baseline_bundle,...": a pair's default model other than the first loaded for it
    default_models: CommaList = []
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")  # auto: CUDA if present
    # int8: decoders with int8 weights on the CPU (models.quantize); int8-rows: the same with
    # each row's activations quantized alone (no output depends on its batch, 25-30% slower);
    # ort / ort-int8: decoding by ONNX Runtime, float or int8 (models.ort_decoder); native-int8:
    # ort-int8 with each decoding step one C++ call, built for this CPU by its C++ compiler
    # (models.native_step); none: float; auto: see models.quantize.resolve
    quantize: str = Field("auto", pattern=r"^(auto|none|int8|int8-rows|ort|ort-int8|native-int8)$")
    # ort-int8's weight type. auto: s8 where the CPU sums u8 x s8 products exactly (VNNI,
    # AMX; 2-3x faster products there), s7 (7-bit s8, which AVX2's int16 sums hold) on AVX2
    # without them, else u8. Read by models.ort_decoder.int8_weights from this same variable.
    int8_weights: str = Field("auto", pattern=r"^(auto|s8|s7|u8)$")
    # native-int8's build: -march of its C++ library ("native": this CPU; e.g. "x86-64-v3" for
    # AVX2 without VNNI) and where built libraries are kept (unset: ~/.cache/ragmt/native).
    # Read by models.native_step from these same variables.
    native_arch: str = Field("native", pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    native_cache: Path | None = None
    max_texts: int = Field(64, ge=1)
    max_chars: int = Field(2000, ge=1)
    max_body_bytes: int = Field(1_000_000, ge=1)
    body_timeout_s: float = Field(10.0, gt=0)  # a body silent this long: 408, connection closed
    header_timeout_s: float = Field(10.0, gt=0)  # a request's headers must arrive within this
    beam_size: int = Field(defaults.BEAM_SIZE, ge=1)
    max_beam_size: int = Field(8, ge=1)
    # GNMT length normalisation exponent of beam search
    length_penalty: float = Field(defaults.LENGTH_PENALTY, ge=0.0, le=5.0)
    # a text of several sentences is translated one sentence at a time (models.segment)
    split_sentences: bool = defaults.SPLIT_SENTENCES
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)

    # Retrieval stores and domains
    data_dir: Path = Path("data")
    stores_dir: Path | None = None  # None: <data_dir>/stores
    domains: CommaList = []  # domains served; empty: every domain directory in stores_dir
    required_domains: CommaList = []  # /readyz fails until each has an active store loaded
    neighbours_k: int = Field(defaults.NEIGHBOURS_K, ge=1, le=64)  # pairs retrieved per text
    reconcile_interval_s: float = Field(10.0, gt=0)  # periodic re-read of the shared registry
    # Live edits a domain's active version may carry before a fold into a new version is
    # queued and activated once built (0: folds only on request)
    fold_edits_at: int = Field(1000, ge=0)
    max_upload_bytes: int = Field(50_000_000, ge=1)  # corpus uploads and files to translate
    # HMAC key shared with the store builder: set, only stores it signed are served or reused
    store_signing_key: SecretStr | None = None
    # Shipped translation memories (index_builder/memories/, the general pool) built into the
    # stores directory at the first start, for a domain that has no store there yet
    install_memories: bool = True

    # Shared state between replicas
    redis_url: str | None = None  # None: everything in-process (a single replica)
    redis_prefix: str = "ragmt"
    run_worker: bool = True  # build store jobs in this process; False: `ragmt worker` does

    # Access
    admin_key: SecretStr | None = None  # None: management routes are off (404)
    api_keys: CommaList = []  # non-empty: translation routes need one of these keys
    # JSON list of scoped keys (ApiKeyEntry); they too make translation routes need a key
    api_keys_file: Path | None = None
    _key_entries: list[ApiKeyEntry] = PrivateAttr(default_factory=list)

    # Load
    rate_limit: int = Field(0, ge=0)  # requests per rate_window_s per API key or client; 0: off
    rate_window_s: float = Field(60.0, gt=0)
    cache_ttl_s: int = Field(3600, ge=0)  # 0: no translation cache
    queue_size: int = Field(256, ge=1)  # texts waiting for decoding; beyond: 503 at once
    batch_size: int = Field(32, ge=1)  # texts per shared decoding batch
    batch_wait_ms: float = Field(5.0, ge=0)  # how long a batch waits for company
    drain_timeout_s: float = Field(30.0, ge=0)  # shutdown: wait this long for in-flight work
    # Files to translate (POST /v1/files): jobs translating at once per replica, jobs a replica
    # holds unfinished (beyond: 503), and how long a finished job's result is kept
    file_jobs: int = Field(2, ge=1)
    max_file_jobs: int = Field(16, ge=1)
    file_ttl_s: float = Field(86400.0, gt=0)
    # CPU threads of torch in this replica; 0: its share of the CPUs it is given (affinity and
    # cgroup quota, divided by replicas_per_host), see service.threads
    torch_threads: int = Field(0, ge=0)
    replicas_per_host: int = Field(1, ge=1)  # replicas sharing this host's CPUs

    @field_validator("domains", "required_domains", "api_keys", "default_models", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("store_signing_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value  # compose passes `${VAR:-}` as ""

    @field_validator("default_models")
    @classmethod
    def _pair_defaults(cls, value: list[str]) -> list[str]:
        for entry in value:
            pair, _, name = entry.partition("=")
            source, _, target = pair.partition("-")
            if not (source and target and name):
                raise ValueError(f"default_models: {entry!r} is not SOURCE-TARGET=MODEL")
        return value

    @property
    def pair_defaults(self) -> dict[tuple[str, str], str]:
        """`default_models` as {(source, target): model name}."""
        out = {}
        for entry in self.default_models:
            pair, _, name = entry.partition("=")
            source, _, target = pair.partition("-")
            out[(source, target)] = name
        return out

    @field_validator("domains", "required_domains")
    @classmethod
    def _domain_names(cls, value: list[str]) -> list[str]:
        for name in value:
            check_domain(name)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.beam_size > self.max_beam_size:
            raise ValueError(
                f"beam_size {self.beam_size} exceeds max_beam_size {self.max_beam_size}"
            )
        if self.queue_size < self.max_texts:
            raise ValueError(
                f"queue_size {self.queue_size} is below max_texts {self.max_texts}: "
                "a request at the limit could never be queued"
            )
        if self.admin_key is not None and not self.admin_key.get_secret_value():
            raise ValueError("admin_key is empty; unset it to turn management routes off")
        if self.api_keys_file is not None:
            admin = [self.admin_key.get_secret_value()] if self.admin_key is not None else []
            self._key_entries = read_keys_file(
                self.api_keys_file, self.domains, [*self.api_keys, *admin]
            )
        return self

    @field_validator("api_keys_file", mode="before")
    @classmethod
    def _no_file_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value  # compose passes `${VAR:-}` as ""

    @property
    def key_entries(self) -> list[ApiKeyEntry]:
        """The scoped client keys of `api_keys_file` (empty without one)."""
        return list(self._key_entries)

    @property
    def keys_required(self) -> bool:
        """Whether client routes need an API key: plain or scoped keys are configured."""
        return bool(self.api_keys or self._key_entries)

    @property
    def signing_key(self) -> bytes | None:
        """`store_signing_key` as the bytes HMAC takes (None: stores need no signature)."""
        key = self.store_signing_key
        return key.get_secret_value().encode() if key is not None else None

    @property
    def bundle_path(self) -> Path:
        """The first bundle served (the default for its pairs, and the encoder of dense stores
        built by the service): `model_path`, or the committed memory model."""
        return self.model_path if self.model_path is not None else DEFAULT_BUNDLE

    @property
    def bundle_paths(self) -> list[Path]:
        """Every bundle to serve, defaults first: `model_path` (unset: the committed bundles,
        the memory model first), then each bundle under `models_dir` by name."""
        first = [self.model_path] if self.model_path is not None else list(COMMITTED_BUNDLES)
        more = bundle_dirs(self.models_dir)
        seen = {p.resolve() for p in first}
        return first + [p for p in more if p.resolve() not in seen]

    @property
    def store_root(self) -> Path:
        """Where retrieval stores live: `stores_dir`, or ``<data_dir>/stores``."""
        return self.stores_dir if self.stores_dir is not None else self.data_dir / "stores"


ENV_PREFIX = "RAGMT_"


def known_variables() -> list[str]:
    """Every RAGMT_* variable the service reads, one per setting."""
    return sorted(ENV_PREFIX + name.upper() for name in Settings.model_fields)


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a RAGMT_* variable that configures nothing (a misspelt one would otherwise be
    ignored in silence, and the server start with a default the operator did not want)."""
    environ = os.environ if environ is None else environ
    known = known_variables()
    for var in sorted(environ):
        if var.upper().startswith(ENV_PREFIX) and var.upper() not in known:
            close = difflib.get_close_matches(var.upper(), known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else "see README.md, Settings"
            raise ValueError(f"unknown environment variable {var}: {hint}")
