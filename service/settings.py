"""Service settings: the one place that reads the environment (variables prefixed `RAGMT_`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.translator import DEFAULT_BUNDLE


class Settings(BaseSettings):
    """Everything the service is configured by; `Settings()` reads RAGMT_* variables."""

    model_config = SettingsConfigDict(env_prefix="RAGMT_", extra="ignore", protected_namespaces=())

    model_path: Path | None = None  # None: the committed default bundle
    device: str = "cpu"
    max_texts: int = Field(64, ge=1)
    max_chars: int = Field(2000, ge=1)
    max_body_bytes: int = Field(1_000_000, ge=1)
    beam_size: int = Field(4, ge=1)
    max_beam_size: int = Field(8, ge=1)
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)

    @model_validator(mode="after")
    def _beam_within_limit(self) -> Settings:
        if self.beam_size > self.max_beam_size:
            raise ValueError(
                f"beam_size {self.beam_size} exceeds max_beam_size {self.max_beam_size}"
            )
        return self

    @property
    def bundle_path(self) -> Path:
        """The bundle to serve: `model_path`, or the committed default bundle."""
        return self.model_path if self.model_path is not None else DEFAULT_BUNDLE
