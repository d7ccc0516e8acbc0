"""``airflow quota history`` as a user runs it (a subprocess against a migrated metadata DB, SQLite and
PostgreSQL): the ledger's real jobs come out as a trace that ``airflow quota simulate --trace`` replays,
with the real preemption and the same jobs on the report's timeline. Its refusal of a bad time range is
read from the command run through Airflow's CLI parser in this process (``tests/cli/in_process.py``: the
same output and exit status without a second ``airflow`` start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_quota.sim.__main__ import main as simulate
from tests.cli.in_process import run_quota
from tests.db.conftest import Database, migrated
from tests.db.test_allocator_cycle import QUEUE, START, db
from tests.db.test_history_replay import QUOTA_FILE, build_history, name
from tests.unit.sim.test_html_report import bars, timelines

pytestmark = [pytest.mark.db, pytest.mark.airflow]
__all__ = ["db", "migrated"]  # the fixtures this module borrows

TASKS = ("b-own", "b-borrow", "a-job", "b-low", "b-high")


def test_history_exports_a_trace_that_simulate_replays_into_a_report(
    db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_history(db)
    trace, quotas, report = tmp_path / "jobs.csv", tmp_path / "quotas.yaml", tmp_path / "report.html"
    quotas.write_text(yaml.safe_dump(QUOTA_FILE))

    exported = db.airflow(
        "quota", "history", "--since", START.isoformat(), "--queue", QUEUE, "-o", str(trace)
    )
    refused = run_quota(["history", "--since", "2026-03-02", "--until", "2026-03-01"], db.engine)

    assert exported.returncode == 0, exported.stderr
    assert f"Exported 5 jobs of job queue {QUEUE}" in exported.stderr
    assert "--stop-seconds 2 " in exported.stderr  # the real stop took 2 s
    assert (
        trace.read_text().splitlines()[0].startswith("submitTime,jobName,quotaShareName,schedulingPriority")
    )
    assert refused.returncode == 1
    assert "--until 2026-03-01 is not after --since 2026-03-02" in refused.stderr
    argv = ["--trace", str(trace), "--config", str(quotas), "--queue", QUEUE, "--stop-seconds", "2"]
    assert simulate([*argv, "--compare-static", "--report", str(report), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert runs["configured"]["preemptions"]["total"] == 1
    assert runs["configured"]["jobStatus"] == {"succeeded": 5, "failed": 0, "unfinished": 0}
    _, timeline = timelines(report.read_text(encoding="utf-8"))["configured"]
    assert {bar["jobId"] for bar in bars(timeline)} == {name(task) for task in TASKS}
    assert {(bar["jobId"], bar["preemptedBy"]) for bar in bars(timeline) if bar["phase"] == "STOPPING"} == {
        (name("b-borrow"), name("a-job"))
    }
