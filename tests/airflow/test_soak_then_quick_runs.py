"""The soak's short run on SQLite, then issue 7's real-Airflow benchmarks' ``--quick`` runs, on one Airflow
(``benchmarks/airflow_quick_runs.py --soak-first``): the soak holds as on PostgreSQL (``test_soak.py``), and
each quick run exits 0 and prints its tables.

The soak plays first, with its DAG file beside the benchmarks' and their emulator and StatsD settings from
the start; the runs' job queues are applied beside the soak's once it drained. One Airflow start, not the
two that the soak's SQLite run and the quick runs cost alone (each script alone still starts its own:
``benchmarks/README.md``).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.airflow.test_soak import assert_the_soak_held, keep_for_the_timeline

pytestmark = pytest.mark.airflow

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    result: subprocess.CompletedProcess[str]
    soak_summary: Path

    @property
    def output(self) -> str:
        return self.result.stdout

    def assert_it_succeeded(self) -> None:
        assert self.result.returncode == 0, self.result.stdout + self.result.stderr[-5000:]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    summary = tmp_path_factory.mktemp("soak") / "summary.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "airflow_quick_runs.py"), "--soak-first", str(summary)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    keep_for_the_timeline(result, "sqlite")
    return Run(result, summary)


def test_a_short_soak_on_sqlite_kills_and_finishes_jobs_and_never_puts_two_trainings_on_one_device(
    run: Run,
) -> None:
    assert_the_soak_held(run.result, run.soak_summary)


def test_airflow_overhead_quick_run_prints_its_tables(run: Run) -> None:
    run.assert_it_succeeded()
    output = run.output
    assert "QuotaTrainingOperator vs SageMakerTrainingOperator in a pool" in output, output
    for text in ("quota #1", "pool #1", "wall s", "scheduler CPU s", "Ratios quota / pool", "default settle"):
        assert text in output, f"{text!r} missing:\n{output}"


def test_preemption_latency_quick_run_prints_its_tables(run: Run) -> None:
    run.assert_it_succeeded()
    output = run.output
    assert "Preemption latency in real Airflow" in output, output
    for text in (
        "preempt decision (audit PREEMPTED)",
        "borrower's job seen Stopped",
        "lender's training job created (CreationTime)",
        "two scheduler loops plus the stop time",
        "scheduler loop, median period",
    ):
        assert text in output, f"{text!r} missing:\n{output}"
