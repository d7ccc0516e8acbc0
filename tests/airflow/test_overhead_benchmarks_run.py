"""Issue 7's real-Airflow benchmarks still run: each ``--quick`` run exits 0 and prints its tables.

Both quick runs share one Airflow (``benchmarks/airflow_quick_runs.py``: the overhead runs, then the
latency repetition, each through its script's own argument parsing and run): one Airflow start, not two.
Each script alone starts its own (``benchmarks/README.md``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def output() -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "airflow_quick_runs.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return result.stdout


def test_airflow_overhead_quick_run_prints_its_tables(output: str) -> None:
    assert "QuotaTrainingOperator vs SageMakerTrainingOperator in a pool" in output, output
    for text in ("quota #1", "pool #1", "wall s", "scheduler CPU s", "Ratios quota / pool", "default settle"):
        assert text in output, f"{text!r} missing:\n{output}"


def test_preemption_latency_quick_run_prints_its_tables(output: str) -> None:
    assert "Preemption latency in real Airflow" in output, output
    for text in (
        "preempt decision (audit PREEMPTED)",
        "borrower's job seen Stopped",
        "lender's training job created (CreationTime)",
        "two scheduler loops plus the stop time",
        "scheduler loop, median period",
    ):
        assert text in output, f"{text!r} missing:\n{output}"
