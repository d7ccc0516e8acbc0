"""The allocator benchmark still runs: a small SQLite run exits 0 and prints its table of cycle times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.databases import benchmark_env

pytestmark = [pytest.mark.db, pytest.mark.airflow]  # the slow tier: see tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]


def test_allocator_cycle_benchmark_small_sqlite_run_prints_its_table() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "allocator_cycle.py"),
            "--sizes",
            "50",
            "--backends",
            "sqlite",
            "--repeats",
            "1",
        ],
        cwd=ROOT,
        env=benchmark_env(),  # its databases copies of the migrated template
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Allocation cycle against the metadata DB" in result.stdout, result.stdout
    for column in ("backend", "waiting jobs", "median ms", "grants"):
        assert column in result.stdout, f"{column!r} missing from the table:\n{result.stdout}"
    for cycle in ("first", "steady", "churn"):
        assert cycle in result.stdout, result.stdout
    # With the garbage collector as Python leaves it and frozen as the hosts run it, and their ratio.
    assert "gc frozen, steady" in result.stdout, result.stdout
    assert "default / frozen" in result.stdout, result.stdout
