"""The two-allocator scale benchmark still runs: a small PostgreSQL run exits 0 and prints its table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

pytestmark = pytest.mark.db

ROOT = Path(__file__).resolve().parents[2]
POSTGRES_SERVER = os.environ.get("QUOTA_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")


def postgresql_reachable() -> bool:
    url = sa.make_url(POSTGRES_SERVER).set(drivername="postgresql+psycopg2", database="postgres")
    engine = sa.create_engine(url, poolclass=sa.NullPool, connect_args={"connect_timeout": 3})
    try:
        with engine.connect():
            return True
    except sa.exc.OperationalError:
        return False
    finally:
        engine.dispose()


def test_scale_allocator_benchmark_small_postgresql_run_prints_its_table() -> None:
    if not postgresql_reachable():
        pytest.skip(f"PostgreSQL not reachable at {POSTGRES_SERVER}")
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
