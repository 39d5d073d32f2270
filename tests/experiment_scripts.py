"""Experiment scripts as modules for their tests: `experiments/` is a folder of scripts, not a
package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def load(name: str) -> ModuleType:
    """`experiments/<name>.py` as a module of that name."""
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
