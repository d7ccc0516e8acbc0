"""The soak's short run (benchmarks/soak.py) on PostgreSQL: one whole deck of its actions (triggers, a clear,
a quota change, SIGKILLs of a training, a task runner, a task supervisor and the scheduler: about 25 s), its
drain, and never two trainings on one device. The same run on SQLite plays on the Airflow that then runs the
benchmarks' quick runs (``test_soak_then_quick_runs.py``), checked by ``assert_the_soak_held`` too.

It asserts what a user would notice: no device held twice in the ledger, no two live trainings on one
device, no training on a device the ledger gave to another job; and that the soak did something (every kind
of action played, kills, finished jobs) and every run ended after it, so the test cannot pass by doing
nothing. The long runs (``--duration 300``, or the 75 s this test ran until 2026-12) are the benchmark's:
benchmarks/README.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.databases import postgres_server_or_skip

pytestmark = pytest.mark.airflow

ROOT = Path(__file__).resolve().parents[2]
#: Whole decks of actions the chaos plays (benchmarks/soak.py's DECK: each kind of action once a deck).
DECKS = 1


def test_a_short_soak_on_postgresql_kills_and_finishes_jobs_and_never_puts_two_trainings_on_one_device(
    tmp_path: Path,
) -> None:
    postgres_server_or_skip()
    summary_path = tmp_path / "summary.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "soak.py"),
            "--backend",
            "postgresql",
            "--duration",
            "0",
            "--decks",
            str(DECKS),
            "--drain",
            "180",
            "--seed",
            "18",
            "--summary",
            str(summary_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    keep_for_the_timeline(result, "postgresql")
    assert_the_soak_held(result, summary_path)


def keep_for_the_timeline(result: subprocess.CompletedProcess[str], backend: str) -> None:
    """Where a whole suite's soak spent its time: its output beside the timeline (tests/timeline.py)."""
    if timeline := os.environ.get("QUOTA_TEST_TIMELINE"):
        Path(f"{timeline}.soak-{backend}.txt").write_text(result.stdout + result.stderr)


def assert_the_soak_held(result: subprocess.CompletedProcess[str], summary_path: Path) -> None:
    """No violation, and the soak did what it is for (its ``--summary`` file says)."""
    output = result.stdout[-8000:] + result.stderr[-4000:]
    assert summary_path.exists(), output
    summary: dict[str, Any] = json.loads(summary_path.read_text())

    assert summary["violations"] == [], output
    assert (summary["ledger_violations"], summary["process_violations"]) == (0, 0), output
    assert result.returncode == 0, output
    # It did what a soak is for: trainings, task processes and the scheduler were killed, jobs finished,
    # and every run ended once the chaos stopped.
    assert sum(summary["kills"].values()) > 0, output
    assert summary["kills"].get("scheduler", 0) > 0, output
    assert summary["jobs_succeeded"] > 0, output
    assert summary["runs_open_after_drain"] == 0, output
    assert summary["decks_played"] >= DECKS, output
    played = set(summary["actions"]) | set(summary["skipped_actions"])
    assert played == {
        "trigger",
        "clear",
        "quota",
        "kill training",
        "kill runner",
        "kill supervisor",
        "kill scheduler",
    }, output
    assert summary["samples"] > summary["duration_s"], output  # about two a second
