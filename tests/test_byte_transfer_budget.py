"""experiments/byte_transfer.py's base budgets: whole epochs, updates or hours of training,
one per system, and the wall-clock-bound run kept apart from the epoch-bound one."""

from __future__ import annotations

import pytest

from tests.experiment_scripts import load

pytestmark = pytest.mark.unit

byte_transfer = load("byte_transfer")
SYSTEMS = ["subword", "byte-ncf"]


def test_a_bare_number_applies_to_every_system_and_names_pick_some() -> None:
    by_system = byte_transfer.by_system
    assert by_system("", SYSTEMS, "--base-steps") == {}
    assert by_system("661", SYSTEMS, "--base-steps") == {"subword": 661, "byte-ncf": 661}
    assert by_system("byte-ncf=3515", SYSTEMS, "--base-steps") == {"byte-ncf": 3515}
    hours = by_system("subword=0.68,byte-ncf=1.5", SYSTEMS, "--base-hours", float)
    assert hours == {"subword": 0.68, "byte-ncf": 1.5}


@pytest.mark.parametrize(
    "spec", ["byte-wsf=10", "subword=", "subword=-1", "subword=0", "subword=x", "0.5"]
)
def test_a_bad_budget_names_the_flag_and_the_part(spec: str) -> None:
    with pytest.raises(SystemExit, match="--base-steps") as err:
        byte_transfer.by_system(spec, SYSTEMS, "--base-steps")
    assert repr(spec.split(",")[0]) in str(err.value)


def test_hours_bound_only_the_clock_and_get_their_own_run_directory() -> None:
    budget, suffix = byte_transfer.base_budget("subword", 1, {}, {"subword": 0.68})
    assert budget == {"max_epochs": None, "max_steps": 10**9, "max_hours": 0.68}
    assert suffix == "-0.68h"
    budget, suffix = byte_transfer.base_budget("byte-ncf", 1, {"byte-ncf": 3515}, {})
    assert (budget, suffix) == ({"max_epochs": None, "max_steps": 3515}, "")
    budget, suffix = byte_transfer.base_budget("subword", 2, {"byte-ncf": 3515}, {})
    assert (budget, suffix) == ({"max_epochs": 2, "max_steps": 10**9}, "")


def test_steps_and_hours_for_one_system_are_refused() -> None:
    with pytest.raises(SystemExit, match="subword: --base-steps and --base-hours"):
        byte_transfer.base_budget("subword", 1, {"subword": 661}, {"subword": 0.5})
