"""Trace mode: a CSV of jobs replayed against a quota file's queue, as configured and as a fixed partition."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from airflow_quota.engine.config import QuotaConfigError
from airflow_quota.sim.__main__ import main
from airflow_quota.sim.scenario import Settings, SubmitJob
from airflow_quota.sim.trace import load_queue_configuration, load_trace, run_trace
from tests.unit.sim.traces import lending_queue, write_trace_files

ROOT = Path(__file__).resolve().parents[3]
TRACES = ROOT / "examples" / "traces"

QUOTAS = (
    "jobQueues:\n"
    + lending_queue("first")
    + """  - jobQueueName: second
    capacityLimits: [{capacityUnit: gpu, maxCapacity: 8}]
    quotaShares:
      - {quotaShareName: x, capacityLimits: [{capacityUnit: gpu, maxCapacity: 8}],
         resourceSharingConfiguration: {strategy: RESERVE}}
"""
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return write_trace_files(tmp_path, QUOTAS)


def test_a_preemption_loses_only_its_stop_time_without_checkpoints(files: tuple[Path, Path]) -> None:
    report = run_trace(*files, settings=Settings(stop_seconds=5))

    (run,) = report.runs
    big = run.result.jobs["big"]
    # big did 15 s (10 + the 5 s stop) before its preemption completed; it resumes at 25 with 85 s left.
    assert (big.status, big.preempted_attempt_count, big.stopped_at) == ("SUCCEEDED", 1, 110)
    assert run.result.metrics.lost_unit_seconds == {"gpu": {"x": 4 * 5, "y": 0}}
    assert run.result.metrics.runnable_seconds["y"].mean == 5  # small waited for the stop


def test_with_a_checkpoint_interval_a_preempted_job_resumes_from_its_last_checkpoint(
    files: tuple[Path, Path],
) -> None:
    report = run_trace(*files, settings=Settings(stop_seconds=5), checkpoint_interval=30)

    big = report.runs[0].result.jobs["big"]
    # Preempted at t=10 with 10 s of progress and no checkpoint yet (the first comes at 30 s): it restarts
    # from 0 at t=25, and loses 4 GPUs x (10 s of progress + 5 s of stopping).
    assert big.stopped_at == 125
    assert report.runs[0].result.metrics.lost_unit_seconds == {"gpu": {"x": 4 * (10 + 5), "y": 0}}


def test_compare_static_replays_the_trace_with_every_share_reserved(files: tuple[Path, Path]) -> None:
    report = run_trace(*files, compare_static=True)

    configured, static = report.runs
    assert (configured.label, static.label) == ("configured", "static")
    assert static.result.queue.shares[0].strategy == "RESERVE"
    # Under a fixed partition big (4 GPUs) can never start in x's 2, and nobody is preempted.
    assert static.result.jobs["big"].status == "RUNNABLE"
    assert static.result.jobs["big"].status_reason == "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"
    assert static.result.metrics.preemptions_total == 0
    assert configured.result.metrics.preemptions_total == 1


def test_the_command_line_prints_both_runs_side_by_side(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    trace, quotas = files

    assert main(["--trace", str(trace), "--config", str(quotas), "--compare-static", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document["runs"]) == {"configured", "static"}
    assert document["jobs"] == 2
    assert document["runs"]["configured"]["jobStatus"] == {"succeeded": 2, "failed": 0, "unfinished": 0}
    assert document["runs"]["static"]["jobStatus"] == {"succeeded": 1, "failed": 0, "unfinished": 1}
    assert document["runs"]["configured"]["preemptions"] == {"total": 1, "byShare": {"x": 1, "y": 0}}
    assert "gpuSecondsLost" in document["definitions"]

    assert main(["--trace", str(trace), "--config", str(quotas), "--compare-static"]) == 0
    text = capsys.readouterr().out
    assert "as configured" in text and "static (every share RESERVE)" in text
    assert "gpuSecondsLost: per capacity unit" in text


def test_queue_selects_a_job_queue_of_the_quota_file(files: tuple[Path, Path]) -> None:
    _, quotas = files

    assert load_queue_configuration(quotas).queue.name == "first"
    assert load_queue_configuration(quotas, "second").queue.capacity == {"gpu": 8}
    with pytest.raises(
        QuotaConfigError, match="there is no job queue 'third' in this file; its job queues: first, second"
    ):
        load_queue_configuration(quotas, "third")


def test_job_names_are_generated_when_the_column_is_absent(files: tuple[Path, Path], tmp_path: Path) -> None:
    _, quotas = files
    trace = tmp_path / "anonymous.csv"
    trace.write_text(
        "submitTime,quotaShareName,capacityUnit,instanceCount,duration\n0,x,gpu,1,5\n3,y,gpu,1,\n"
    )

    events = load_trace(trace, load_queue_configuration(quotas))

    assert [event.action.request.job_name for event in events if isinstance(event.action, SubmitJob)] == [
        "job-00001",
        "job-00002",
    ]
    last = events[1].action
    assert isinstance(last, SubmitJob) and last.duration is None  # empty duration: runs until the end


@pytest.mark.parametrize(
    ("content", "path", "message"),
    [
        (
            "submitTime,quotaShareName,capacityUnit,instanceCount,colour\n",
            "header",
            "unknown column 'colour'",
        ),
        ("submitTime,quotaShareName,capacityUnit\n", "header", "column instanceCount is missing"),
        (
            "submitTime,quotaShareName,capacityUnit,instanceCount\n0,x,gpu,1\n1,x,gpu,two\n",
            "line 3, column instanceCount",
            "instanceCount is 'two'",
        ),
        (
            "submitTime,quotaShareName,capacityUnit,instanceCount\nsoon,x,gpu,1\n",
            "line 2, column submitTime",
            "is 'soon': it must be a number of seconds >= 0",
        ),
        (
            "submitTime,quotaShareName,capacityUnit,instanceCount\n0,z,gpu,1\n",
            "line 2, column quotaShareName",
            "quota share 'z' does not exist in job queue 'first'; use one of: x, y",
        ),
        (
            "submitTime,jobName,quotaShareName,capacityUnit,instanceCount\n0,a,x,gpu,1\n1,a,x,gpu,1\n",
            "line 3, column jobName",
            "job name a is already used on line 2",
        ),
    ],
    ids=["unknown_column", "missing_column", "bad_count", "bad_time", "unknown_share", "duplicate_name"],
)
def test_trace_problems_are_reported_by_line_and_column(
    files: tuple[Path, Path], tmp_path: Path, content: str, path: str, message: str
) -> None:
    _, quotas = files
    trace = tmp_path / "bad.csv"
    trace.write_text(content)

    with pytest.raises(QuotaConfigError) as raised:
        load_trace(trace, load_queue_configuration(quotas))

    assert any(issue.path == path and message in issue.message for issue in raised.value.issues), raised.value


def test_the_example_trace_is_what_its_generator_makes_and_replays_against_its_quota_file(
    tmp_path: Path,
) -> None:
    make_trace = runpy.run_path(str(TRACES / "make_trace.py"), run_name="make_trace")

    make_trace["write_trace"](tmp_path / "again.csv")
    assert (tmp_path / "again.csv").read_bytes() == (TRACES / "bursty_teams.csv").read_bytes()

    events = load_trace(TRACES / "bursty_teams.csv", load_queue_configuration(TRACES / "quotas.yaml"))
    assert 1_900 <= len(events) <= 2_100
    shares = {
        event.action.request.quota_share_name for event in events if isinstance(event.action, SubmitJob)
    }
    assert shares == {"prod", "eval", "research", "vision"}
