"""Service settings: the one place that reads the environment (variables prefixed `RAGMT_`).

Lists (`RAGMT_API_KEYS`, `RAGMT_REQUIRED_DOMAINS`, `RAGMT_DOMAINS`) are comma-separated.
Retrieval stores are read from `stores_dir`, by default ``<data_dir>/stores`` (``data/stores``
relative to the working directory, next to the prepared corpora of ``ragmt data prepare``).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from index_builder.store import DOMAIN_PATTERN, DOMAIN_RE, check_domain
from models import defaults
from models.translator import BASELINE_BUNDLE, DEFAULT_BUNDLE
from service.registry import bundle_dirs

__all__ = ["DOMAIN_PATTERN", "DOMAIN_RE", "VERSION_PATTERN", "VERSION_RE", "Settings"]
# Store version ids (index_builder.store names them `<UTC time>Z-<hash>`); never a path.
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
VERSION_RE = re.compile(VERSION_PATTERN)

CommaList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    """Everything the service is configured by; `Settings()` reads RAGMT_* variables."""

    model_config = SettingsConfigDict(env_prefix="RAGMT_", extra="ignore", protected_namespaces=())

    # Models and decoding
    model_path: Path | None = None  # None: the committed bundles (memory model first)
    models_dir: Path | None = None  # every bundle directory in it is served too
    # "en-de=baseline_bundle,...": a pair's default model other than the first loaded for it
    default_models: CommaList = []
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$")  # auto: CUDA if present
    max_texts: int = Field(64, ge=1)
    max_chars: int = Field(2000, ge=1)
    max_body_bytes: int = Field(1_000_000, ge=1)
    body_timeout_s: float = Field(10.0, gt=0)  # a body silent this long: 408, connection closed
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
    max_upload_bytes: int = Field(50_000_000, ge=1)  # corpus uploads (management route)
    # HMAC key shared with the store builder: set, only stores it signed are served or reused
    store_signing_key: SecretStr | None = None

    # Shared state between replicas
    redis_url: str | None = None  # None: everything in-process (a single replica)
    redis_prefix: str = "ragmt"
    run_worker: bool = True  # build store jobs in this process; False: `ragmt worker` does

    # Access
    admin_key: SecretStr | None = None  # None: management routes are off (404)
    api_keys: CommaList = []  # non-empty: translation routes need one of these keys

    # Load
    rate_limit: int = Field(0, ge=0)  # requests per rate_window_s per API key or client; 0: off
    rate_window_s: float = Field(60.0, gt=0)
    cache_ttl_s: int = Field(3600, ge=0)  # 0: no translation cache
    queue_size: int = Field(256, ge=1)  # texts waiting for decoding; beyond: 503 at once
    batch_size: int = Field(32, ge=1)  # texts per shared decoding batch
    batch_wait_ms: float = Field(5.0, ge=0)  # how long a batch waits for company
    drain_timeout_s: float = Field(30.0, ge=0)  # shutdown: wait this long for in-flight work
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
        return self

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
        """Every bundle to serve, defaults first: `model_path` (unset: the committed memory
        model, then the committed baseline), then each bundle under `models_dir` by name."""
        first = (
            [self.model_path] if self.model_path is not None else [DEFAULT_BUNDLE, BASELINE_BUNDLE]
        )
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
