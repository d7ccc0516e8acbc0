"""The two-allocator scale benchmark still runs: a small PostgreSQL run exits 0 and prints its table.

It needs PostgreSQL (``QUOTA_TEST_POSTGRES``); it skips when none is reachable, and fails instead under CI.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.databases import benchmark_env, postgres_server_or_skip

pytestmark = [pytest.mark.db, pytest.mark.airflow]  # the slow tier: see tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]


def test_scale_allocator_benchmark_small_postgresql_run_prints_its_table() -> None:
    postgres_server_or_skip()
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scale_allocator.py"),
            "--sizes",
            "50",
            "--shares",
            "20",
            "--seconds",
            "3",
        ],
        cwd=ROOT,
        env=benchmark_env(),  # its databases copies of the migrated template
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Allocator processes on one PostgreSQL database" in result.stdout, result.stdout
    for column in ("processes", "waiting jobs", "shares", "cycles committed", "cycles skipped", "grants/s"):
        assert column in result.stdout, f"{column!r} missing from the table:\n{result.stdout}"
    assert "median vs 1" in result.stdout, result.stdout
