"""The allocation-quality benchmark still runs: a small trace passes its bound checks and prints its table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_allocation_quality_benchmark_small_run_prints_its_table() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "allocation_quality.py"), "--load", "0.05"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Allocation quality on a multi-team trace" in result.stdout, result.stdout
    for column in ("quota", "fixed partition", "one pool", "bound"):
        assert column in result.stdout, f"{column!r} missing from the table:\n{result.stdout}"
    for metric in (
        "makespan / bound",
        "makespan / bound under the file's caps",
        "GPU utilization while work is queued",
        "wait research: p95",
        "GPU-seconds lost",
    ):
        assert metric in result.stdout, f"{metric!r} missing from the table:\n{result.stdout}"
    assert "goal (makespan within 5% of the work-conserving bound)" in result.stdout, result.stdout
    assert "what the file allows: bound under the file's caps" in result.stdout, result.stdout
    assert "the same goal for the sharing mechanism without" in result.stdout, result.stdout
