"""The Kueue scheduling benchmark still runs: a tiny PostgreSQL run finishes every job and prints its table;
so does its turnover cycle on its own (``turnover_cycle.py``).

They need PostgreSQL (``QUOTA_TEST_POSTGRES``); it skips when none is reachable, and fails instead under CI.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.databases import benchmark_env, postgres_server_or_skip

pytestmark = [pytest.mark.db, pytest.mark.airflow]  # the slow tier: see tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(script: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/<script>`` on the test's PostgreSQL server; it must exit 0."""
    postgres_server_or_skip()
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *arguments],
        cwd=ROOT,
        env=benchmark_env(),  # its databases copies of the migrated template
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_kueue_scheduling_benchmark_tiny_run_finishes_every_job_and_prints_its_table() -> None:
    result = run_benchmark("kueue_scheduling.py", "--scale", "0.01", "--timeout", "120")
    assert "Kueue's scheduler benchmark (baseline)" in result.stdout, result.stdout
    for metric in ("makespan (s)", "usage, all shares", "mean time to admission, large", "physical bound"):
        assert metric in result.stdout, f"{metric!r} missing from the table:\n{result.stdout}"
    assert "180 of 180" in result.stdout, result.stdout
    assert "0 failed cycles" in result.stdout, result.stdout
    # One line per job class that finished (when it ran, how busy the capacity was).
    assert re.search(
        r"phase, (large|medium|small): [0-9.]+ to [0-9.]+ s, the capacity running", result.stdout
    ), result.stdout


def test_turnover_cycle_benchmark_tiny_run_finishes_and_grants_again_in_each_cycle() -> None:
    result = run_benchmark(
        "turnover_cycle.py", "--waiting", "2000", "--medium", "300", "--cycles", "2", "--warm-up", "1"
    )
    found = re.search(r"over 2 cycles; finished / granted per cycle: (\d+)/(\d+), (\d+)/(\d+)", result.stdout)
    assert found is not None, result.stdout
    # Each timed cycle finished what the one before granted, and granted the capacity again.
    assert all(int(count) > 0 for count in found.groups()), result.stdout
