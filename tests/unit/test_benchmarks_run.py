"""The engine benchmark still runs: its quick mode exits 0 and prints its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.airflow  # the slow tier (tests/conftest.py): a benchmark run
def test_engine_cycle_benchmark_quick_run_prints_its_table() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "engine_cycle.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Engine allocation cycle (plan_cycle)" in result.stdout, result.stdout
    for column in ("RUNNABLE", "median ms", "p90 ms", "decisions", "n log n growth"):
        assert column in result.stdout, f"{column!r} missing from the table:\n{result.stdout}"
    assert "steady" in result.stdout and "decide" in result.stdout, result.stdout
