"""Every table of ``airflow quota ...`` fits ordinary terminals: rendered through rich's real console at 80,
100 and 120 columns, each column's header and each job's label stay whole, no line is cut and no value is
dropped; ``--wide`` shows whole job ids. And ``validate`` without Airflow writes no file.

The tables are the commands' own (the functions the commands print), fed what the commands read: the
engine's state after a real allocation cycle of the example quota file, and ledger rows.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console, RenderableType

from airflow_quota.aws_batch.queue_reports import service_job_report
from airflow_quota.cli.aws_tables import aws_job_description, aws_jobs_tables, aws_snapshot_tables
from airflow_quota.cli.events import events_table
from airflow_quota.cli.jobs import job_description, job_report, jobs_tables
from airflow_quota.cli.shares import configuration_table, share_reports, usage_table, usage_tables
from airflow_quota.cli.snapshot import queue_snapshot, snapshot_tables
from airflow_quota.cli.validate import main as validate_main
from airflow_quota.cli.validate import queue_tables
from airflow_quota.config_file import load_quota_design
from airflow_quota.engine.lifecycle import submit_jobs
from airflow_quota.engine.model import JobRequest, QueueState
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.ledger.aws_job_fields import aws_job_fields
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.views import AttemptTimes

EXAMPLE_FILE = Path(__file__).parents[2] / "examples" / "quotas.yaml"
WIDTHS = (80, 100, 120)
RUN_ID = "manual__2026-12-01T03:00:00.123456+00:00"
#: A job as the operator names it (dag/run/task/map index/try), and the name tables show for it
#: (``airflow_quota.job_names``: a first try's number left out, the run only where two runs are shown).
BORROWER_ID = f"gpu_quota_demo/{RUN_ID}/train_trial/3/1"
BORROWER_LABEL = "gpu_quota_demo / train_trial[3]"
WAITER_ID = f"gpu_quota_demo/{RUN_ID}/evaluate_checkpoint/-1/2"
WAITER_LABEL = "gpu_quota_demo / evaluate_checkpoint #2"
STARTED = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
STOPPED = datetime(2026, 12, 1, 3, 40, tzinfo=UTC)
LONG_REASON = (
    "Waiting to borrow: research holds 8 ml.p4d.24xlarge of its ceiling of 8 (4 own, 4 borrowed from "
    "evaluation); 0 ml.p4d.24xlarge can be borrowed from other shares now"
)


def example_state() -> QueueState:
    """The example queue after one cycle: research borrows evaluation's p4d units, two jobs wait."""
    queue = load_quota_design([str(EXAMPLE_FILE)]).config.to_job_queues()[0]
    submissions = [
        (BORROWER_ID, JobRequest("train-trial", "research", "ml.p4d.24xlarge", 6, 100), 0.0, 1),
        (WAITER_ID, JobRequest("evaluate", "research", "ml.p4d.24xlarge", 4, 5), 1.0, 2),
        (
            f"gpu_quota_demo/{RUN_ID}/score/0/1",
            JobRequest("score", "evaluation", "ml.g5.12xlarge", 3),
            2.0,
            3,
        ),
    ]
    state = submit_jobs(QueueState(queue, {}), submissions)
    return plan_cycle(state, 10.0).state


def job_row(job_id: str, status: str, reason: str) -> JobRow:
    dag_id, run_id, task_id, map_index, try_number = (
        job_id.split("/", 1)[0],
        RUN_ID,
        *job_id.rsplit("/", 3)[1:],
    )
    return JobRow(
        job_id=job_id,
        job_queue_name="gpu-training",
        quota_share_name="research",
        job_name="train-trial",
        capacity_unit="ml.p4d.24xlarge",
        instance_count=6,
        scheduling_priority=100,
        status=status,
        status_reason=reason,
        submitted_at=STARTED,
        started_at=None,
        preempted_attempt_count=1,
        recent_preempted_attempts=[
            {
                "attempt": 1,
                "startedAt": STARTED.isoformat(),
                "stoppedAt": STARTED.isoformat(),
                "preemptedBy": f"gpu_quota_demo/{RUN_ID}/urgent_eval/-1/1",
                "rule": "RECLAIM",
                "statusReason": LONG_REASON,
            }
        ],
        attempt=2,
        held_capacity_unit=None,
        held_instance_count=0,
        borrowed_instance_count=0,
        dag_id=dag_id,
        run_id=run_id,
        task_id=task_id,
        map_index=int(map_index),
        try_number=int(try_number),
    )


def validate_tables(wide: bool, width: int) -> list[RenderableType]:
    return list(queue_tables(example_state().queue, wide=wide))


def shares_list_tables(wide: bool, width: int) -> list[RenderableType]:
    reports = share_reports(example_state())
    return [configuration_table("quota shares", reports, wide=wide), *usage_tables("q", reports, wide=wide)]


def shares_describe_tables(wide: bool, width: int) -> list[RenderableType]:
    research = next(r for r in share_reports(example_state()) if r["quotaShareName"] == "research")
    return [usage_table("Capacity and usage", "Capacity unit", list(research["units"].items()), wide=wide)]


def snapshot_renderables(wide: bool, width: int) -> list[RenderableType]:
    return snapshot_tables(queue_snapshot(example_state()), width=width, wide=wide)


def finished_job_report(row: JobRow) -> dict[str, Any]:
    """``jobs describe``'s JSON of a job whose last attempt started at STARTED and stopped at STOPPED."""
    return job_report(
        row, {}, aws_job_fields(row, AttemptTimes(STARTED, STOPPED), None, iso_times=True), detailed=True
    )


def jobs_list_tables(wide: bool, width: int) -> list[RenderableType]:
    rows = [
        job_row(BORROWER_ID, "SUCCEEDED", "Its task succeeded"),
        job_row(WAITER_ID, "RUNNABLE", LONG_REASON),
    ]
    reports = [
        job_report(
            row,
            {WAITER_ID: 1},
            aws_job_fields(row, AttemptTimes(row.started_at, None), None, iso_times=True),
            detailed=False,
        )
        for row in rows
    ]
    return jobs_tables(reports, 2, width=width, wide=wide)


def jobs_describe_tables(wide: bool, width: int) -> list[RenderableType]:
    row = job_row(BORROWER_ID, "SUCCEEDED", "Its task succeeded")
    report = finished_job_report(row)
    return job_description(report, wide=wide)


def events_tables(
    wide: bool, width: int, queues: tuple[str, ...] = ("gpu-training",)
) -> list[RenderableType]:
    documents = [
        {
            "at": STARTED.isoformat(),
            "jobQueueName": queue,
            "kind": kind,
            "quotaShareName": "research",
            "jobId": BORROWER_ID,
            "message": message,
        }
        for queue in queues
        for kind, message in (
            ("REQUEUED", f"Preempted by gpu_quota_demo/{RUN_ID}/urgent_eval/-1/1; requeued"),
            ("SUCCEEDED", "Its task succeeded"),
        )
    ]
    return [events_table(documents, width=width, wide=wide)]


#: A service job of a job queue AWS Batch schedules: AWS Batch's job id (a UUID), and the label tables show.
SERVICE_JOB_ID = "8f1c2d3e-4b5a-4c6d-9e8f-0a1b2c3d4e5f"
SERVICE_JOB_LABEL = "8f1c2d3e"
CREATED = "2026-12-01T03:00:00.123000+00:00"


def service_jobs() -> list[dict[str, object]]:
    """Two service jobs as ``service_jobs_from_aws`` reports them (names are the operator's task keys)."""
    return [
        {
            "jobId": SERVICE_JOB_ID,
            "jobName": "gpu_quota_demo-train_trial-3f2a9c1b7d",
            "quotaShareName": "research",
            "status": "RUNNABLE",
            "statusReason": LONG_REASON,
            "capacityUsage": [{"capacityUnit": "ml.p4d.24xlarge", "quantity": 4}],
            "createdAt": CREATED,
        },
        {
            "jobId": "1a2b3c4d-0000-4c6d-9e8f-0a1b2c3d4e5f",
            "jobName": "gpu_quota_demo-evaluate_checkpoint-0123456789",
            "quotaShareName": "prod-retraining",
            "status": "SUCCEEDED",
            "statusReason": "",
            "capacityUsage": [],
            "createdAt": CREATED,
        },
    ]


def aws_jobs_list_tables(wide: bool, width: int) -> list[RenderableType]:
    return aws_jobs_tables("batch-gpu-training", service_jobs(), width=width, wide=wide)


def aws_job_describe_tables(wide: bool, width: int) -> list[RenderableType]:
    """``jobs describe`` of a service job AWS Batch preempted once (a DescribeServiceJob answer)."""
    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-job/gpu-quota-demo-train-trial-3f2a9c1b7d-a{}"
    at = 1_764_558_000_123  # 2025-12-01T03:00:00.123Z, in AWS Batch's epoch milliseconds
    first = {
        "serviceResourceId": {"name": "TrainingJobArn", "value": arn.format(1)},
        "startedAt": at,
        "stoppedAt": at + 60_000,
        "statusReason": LONG_REASON,
    }
    second = {
        "serviceResourceId": {"name": "TrainingJobArn", "value": arn.format(2)},
        "startedAt": at + 90_000,
    }
    described = {
        "jobId": SERVICE_JOB_ID,
        "jobArn": f"arn:aws:batch:us-east-1:123456789012:service-job/{SERVICE_JOB_ID}",
        "jobName": "gpu_quota_demo-train_trial-3f2a9c1b7d",
        "jobQueue": "arn:aws:batch:us-east-1:123456789012:job-queue/batch-gpu-training",
        "quotaShareName": "research",
        "status": "RUNNING",
        "statusReason": "",
        "schedulingPriority": 10,
        "createdAt": at,
        "attempts": [first, second],
        "latestAttempt": {"serviceResourceId": second["serviceResourceId"]},
        "capacityUsage": [{"capacityUnit": "ml.p4d.24xlarge", "quantity": 4.0}],
        "preemptionSummary": {"preemptedAttemptCount": 1, "recentPreemptedAttempts": [first]},
    }
    return aws_job_description(service_job_report(described), width=width, wide=wide)


def aws_snapshot_renderables(wide: bool, width: int) -> list[RenderableType]:
    queue = {
        "jobQueueName": "batch-gpu-training",
        "scheduledBy": "AWS_BATCH",
        "capacityUsage": [{"capacityUnit": "ml.p4d.24xlarge", "quantity": 6}],
        "quotaShares": [
            {
                "quotaShareName": "prod-retraining",
                "capacityUsage": [{"capacityUnit": "ml.p4d.24xlarge", "quantity": 6}],
                "frontOfQueue": [
                    {
                        "position": 1,
                        "jobId": SERVICE_JOB_ID,
                        "jobArn": f"arn:aws:batch:us-east-1:123456789012:service-job/{SERVICE_JOB_ID}",
                        "earliestTimeAtPosition": CREATED,
                    }
                ],
            }
        ],
    }
    return aws_snapshot_tables(queue, width=width, wide=wide)


#: Command -> (its tables, the headers they must show whole, the job label they must show whole).
TABLES: dict[str, tuple[Callable[[bool, int], list[RenderableType]], tuple[str, ...], str | None]] = {
    "validate": (
        validate_tables,
        (
            "Quota share",
            "Strategy",
            "Borrow limit",
            "In-share preemption",
            "State",
            "Capacity unit",
            "Limit",
            "Ceiling",
        ),
        None,
    ),
    "shares list": (
        shares_list_tables,
        (
            "Quota share",
            "Strategy",
            "Borrow limit",
            "In-share preemption",
            "State",
            "Limit",
            "Ceiling",
            "Own",
            "Borrowed",
            "Lent",
            "Idle",
            "Running",
            "Runnable",
        ),
        None,
    ),
    "shares describe": (
        shares_describe_tables,
        ("Capacity unit", "Limit", "Ceiling", "Own", "Borrowed", "Lent", "Idle", "Running", "Runnable"),
        None,
    ),
    "snapshot": (
        snapshot_renderables,
        ("Quota share", "Own", "Borrowed", "Lent", "Idle", "Position", "Job", "Priority", "Status reason"),
        WAITER_LABEL,
    ),
    "jobs list": (
        jobs_list_tables,
        (
            "Job",
            "Quota share",
            "Status",
            "Priority",
            "Capacity",
            "Preempted",
            "Status reason",
        ),
        BORROWER_LABEL,
    ),
    "jobs describe": (
        jobs_describe_tables,
        ("Started at", "Stopped at", "Attempt", "Preempted by", "Rule", "Status reason"),
        "gpu_quota_demo / urgent_eval",
    ),
    "events": (events_tables, ("At", "Kind", "Quota share", "Job", "Message"), BORROWER_LABEL),
    "jobs list of a queue AWS Batch schedules": (
        aws_jobs_list_tables,
        ("Job", "Name", "Quota share", "Status", "Capacity", "Created", "Status reason"),
        SERVICE_JOB_LABEL,
    ),
    "jobs describe of a service job AWS Batch schedules": (
        aws_job_describe_tables,
        ("Attempt", "Training job", "Started at", "Stopped at"),
        SERVICE_JOB_LABEL,
    ),
    "snapshot of a queue AWS Batch schedules": (
        aws_snapshot_renderables,
        ("Quota share", "Capacity unit", "In use", "Position", "Job", "At this position since"),
        SERVICE_JOB_LABEL,
    ),
    "events of two job queues": (
        lambda wide, width: events_tables(wide, width, ("gpu-training", "local-gpus")),
        ("At", "Job queue", "Kind", "Quota share", "Job", "Message"),
        BORROWER_LABEL,
    ),
}


def render(renderables: list[RenderableType], width: int) -> list[str]:
    out = Console(width=width, file=io.StringIO(), highlight=False, color_system=None)
    for renderable in renderables:
        out.print(renderable)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    return [line.rstrip() for line in text.splitlines()]


def name_is_readable(name: str, lines: list[str]) -> bool:
    """A job's name on one line, or wrapped between its words, each word whole (never split inside)."""
    if any(name in line for line in lines):
        return True
    row = 0
    for word in name.split():  # each word whole, on the same line as the word before or below it
        pattern = re.compile(rf"(?<!\S){re.escape(word)}(?!\S)")
        found = [index for index in range(row, len(lines)) if pattern.search(lines[index])]
        if not found:
            return False
        row = found[0]
    return True


def header_is_readable(header: str, lines: list[str]) -> bool:
    """On one line, or wrapped between its words: each word whole, each next word right below the last."""
    if any(header in line for line in lines):
        return True
    first, *rest = header.split()
    for row, line in enumerate(lines):
        for match in re.finditer(rf"(?<!\S){re.escape(first)}(?!\S)", line):
            below = lines[row + 1 : row + 1 + len(rest)]
            if len(below) == len(rest) and all(
                re.match(rf"{re.escape(word)}(?!\S)", text[match.start() :])
                for text, word in zip(below, rest, strict=True)
            ):
                return True
    return False


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", TABLES)
def test_every_header_and_job_label_stays_readable_at_ordinary_widths(command: str, width: int) -> None:
    build, headers, label = TABLES[command]
    lines = render(build(False, width), width)
    unreadable = [header for header in headers if not header_is_readable(header, lines)]
    assert not unreadable, f"{command} at {width} columns cuts {unreadable}:\n" + "\n".join(lines)
    if label is not None:
        assert name_is_readable(label, lines), f"{command} at {width}:\n" + "\n".join(lines)
    assert max(map(len, lines)) <= width
    assert "…" not in "\n".join(lines), "a value was cut instead of wrapped"


@pytest.mark.parametrize("width", [100, 120])
@pytest.mark.parametrize("command", TABLES)
def test_from_100_columns_every_header_is_on_one_line(command: str, width: int) -> None:
    build, headers, _ = TABLES[command]
    lines = render(build(False, width), width)
    assert [header for header in headers if not any(header in line for line in lines)] == []


@pytest.mark.parametrize("command", ["jobs list", "snapshot", "events"])
def test_wide_shows_whole_job_ids_on_one_line(command: str) -> None:
    build, _, _ = TABLES[command]
    text = "\n".join(render(build(True, 1000), 1000))
    assert f"gpu_quota_demo/{RUN_ID}/" in text


@pytest.mark.parametrize(
    "command", ["jobs list of a queue AWS Batch schedules", "snapshot of a queue AWS Batch schedules"]
)
def test_wide_shows_whole_service_job_ids_and_times_on_one_line(command: str) -> None:
    build, _, _ = TABLES[command]
    lines = render(build(True, 1000), 1000)
    assert any(SERVICE_JOB_ID in line and CREATED in line for line in lines)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "command", ["jobs list of a queue AWS Batch schedules", "snapshot of a queue AWS Batch schedules"]
)
def test_service_jobs_keep_dates_share_names_and_capacity_units_whole(command: str, width: int) -> None:
    """A date wraps before its time, never inside itself; a share name and a capacity unit stay whole."""
    build, _, _ = TABLES[command]
    lines = render(build(False, width), width)
    text = "\n".join(lines)
    for word in ("2026-12-01", "prod-retraining", "ml.p4d.24xlarge"):
        assert word in text, f"{command} at {width} breaks {word}:\n{text}"


def test_service_job_reasons_follow_the_table_below_120_columns_and_keep_every_word() -> None:
    lines = render(aws_jobs_list_tables(False, 80), 80)
    assert "Status reasons" in lines
    text = " ".join(" ".join(lines).split())
    assert f"{SERVICE_JOB_LABEL}: Waiting to borrow:" in text
    for word in LONG_REASON.split():
        assert word in text


def test_wrapped_reasons_keep_every_word() -> None:
    text = " ".join(" ".join(render(jobs_list_tables(False, 80), 80)).split())
    for word in LONG_REASON.split():
        assert word in text


def test_usage_lays_out_each_limit_as_own_lent_and_idle() -> None:
    """Research borrows 2 ml.p4d.24xlarge above its limit of 4: evaluation lends them, prod-retraining
    (RESERVE) lends nothing."""
    p4d = {r["quotaShareName"]: r["units"]["ml.p4d.24xlarge"] for r in share_reports(example_state())}
    figures = {name: (u["limit"], u["own"], u["borrowed"], u["lent"], u["idle"]) for name, u in p4d.items()}
    assert figures == {
        "prod-retraining": (2, 0, 0, 0, 2),
        "evaluation": (2, 0, 0, 2, 0),
        "research": (4, 4, 2, 0, 0),
    }


def test_a_finished_job_keeps_its_start_and_end_times() -> None:
    row = job_row(BORROWER_ID, "SUCCEEDED", "Its task succeeded")
    lines = render(jobs_describe_tables(False, 80), 80)
    assert any("Started at" in line and STARTED.isoformat() in line for line in lines)
    assert any("Stopped at" in line and STOPPED.isoformat() in line for line in lines)
    report = finished_job_report(row)
    assert (report["startedAt"], report["stoppedAt"]) == (STARTED.isoformat(), STOPPED.isoformat())


def tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


#: The no-Airflow validator's two entries: the console script a user runs, and the module.
VALIDATORS = {
    "airflow-quota-validate": [str(Path(sys.executable).with_name("airflow-quota-validate"))],
    "module": [sys.executable, "-m", "airflow_quota.cli.validate"],
}


@pytest.mark.parametrize("entry", VALIDATORS)
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_validate_without_airflow_home_writes_no_file(tmp_path: Path, as_json: bool, entry: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    before = tree(home)
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    env |= {"HOME": str(home), "COLUMNS": "80"}
    result = subprocess.run(
        [*VALIDATORS[entry], str(EXAMPLE_FILE), *(["--json"] if as_json else [])],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stdout or '"valid": true' in result.stdout
    assert tree(home) == before
    assert tree(tmp_path) == ["home"]


@pytest.mark.parametrize("width", WIDTHS)
def test_validate_in_a_terminal_of_columns_width_keeps_every_header(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The command's own entry point in this process (a new interpreter cost 1.6 CPU-s a width): its output
    # is no terminal, as in a pipe, and its console takes the width from COLUMNS.
    monkeypatch.setenv("COLUMNS", str(width))

    assert validate_main([str(EXAMPLE_FILE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    _, headers, _ = TABLES["validate"]
    assert [header for header in headers if not header_is_readable(header, lines)] == []
    assert max(map(len, lines)) <= width


#: Two runs of one DAG (the demo's rounds): their jobs must be told apart by their run.
FIRST_RUN, SECOND_RUN = "demo-20261201-030000", "demo-20261201-031500"
PRETRAIN_ID = f"demo_research/{FIRST_RUN}/pretrain/-1/1"


def sweep_job(run_id: str, task_id: str) -> str:
    return f"demo_nlp_sweep/{run_id}/{task_id}/-1/1"


def two_round_events() -> list[dict[str, Any]]:
    """The audit rows of two demo rounds as the events command reads them (messages as the ledger writes
    them: each begins with its row's job id, a preemption names its preemptor by id)."""
    first_a, second_a = sweep_job(FIRST_RUN, "trial_a"), sweep_job(SECOND_RUN, "trial_a")
    first_b = sweep_job(FIRST_RUN, "trial_b")
    return [
        {
            "at": STARTED.isoformat(),
            "jobQueueName": "workstation",
            "kind": kind,
            "quotaShareName": share,
            "jobId": job_id,
            "message": message,
        }
        for kind, share, job_id, message in (
            (
                "SUBMITTED",
                "nlp",
                first_a,
                f"{first_a} submitted to quota share nlp: 1 local-gpu, schedulingPriority 10",
            ),
            ("GRANTED", "nlp", second_a, f"{second_a} granted 1 local-gpu (1 borrowed)"),
            (
                "PREEMPTED",
                "nlp",
                first_b,
                f"{first_b} (nlp) preempted by {PRETRAIN_ID} (research), rule RECLAIM: its 1 local-gpu go to "
                f"{PRETRAIN_ID} once it has stopped",
            ),
            ("CONFIG_CHANGED", None, None, "quota configuration revision 3 applied by root from quotas.yaml"),
        )
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_events_give_the_message_the_room_and_never_repeat_the_rows_job(width: int) -> None:
    lines = render([events_table(two_round_events(), width=width)], width)
    text = "\n".join(lines)
    header = next(line for line in lines if "Message" in line)
    # The Message column is the widest: at least 40 columns at 80, more on wider consoles.
    assert width - header.index("Message") >= 40 + (width - 80) // 4, text
    assert max(map(len, lines)) <= width
    flat = " ".join(text.split())
    # No job id anywhere: the Job column and the messages name jobs; a message does not begin with its job.
    assert "demo_nlp_sweep/" not in flat and "/-1/1" not in flat
    for start in (
        "Submitted to quota share nlp",
        "Granted 1 local-gpu (1 borrowed)",
        "Preempted by demo_research",
    ):
        assert start in flat, text
    assert "trial_a (run demo-20261201-030000) submitted" not in flat
    assert "(nlp) preempted" not in flat


@pytest.mark.parametrize("width", WIDTHS)
def test_events_name_each_job_with_its_run_where_two_runs_are_shown_never_splitting_a_word(
    width: int,
) -> None:
    lines = render([events_table(two_round_events(), width=width)], width)
    for name in (
        f"demo_nlp_sweep / trial_a (run {FIRST_RUN})",
        f"demo_nlp_sweep / trial_a (run {SECOND_RUN})",
        f"demo_nlp_sweep / trial_b (run {FIRST_RUN})",
        "demo_research / pretrain",  # one run of its DAG: no run
    ):
        assert name_is_readable(name, lines), f"{name} at {width}:\n" + "\n".join(lines)
    assert "demo_research / pretrain (run" not in " ".join(" ".join(lines).split())


def two_round_reports() -> list[dict[str, Any]]:
    """``jobs list``'s reports of trial_a in two runs of one DAG, and a job of another DAG."""
    reports = []
    for job_id in (sweep_job(FIRST_RUN, "trial_a"), sweep_job(SECOND_RUN, "trial_a"), PRETRAIN_ID):
        dag_id, run_id, task_id, _, _ = job_id.split("/")
        row = job_row(BORROWER_ID, "RUNNABLE", f"Waiting for {PRETRAIN_ID} to stop")
        row.job_id, row.dag_id, row.run_id, row.task_id, row.map_index = job_id, dag_id, run_id, task_id, -1
        fields = aws_job_fields(row, AttemptTimes(None, None), None, iso_times=True)
        reports.append(job_report(row, {job_id: 1}, fields, detailed=False))
    return reports


@pytest.mark.parametrize("width", WIDTHS)
def test_jobs_list_tells_two_runs_of_a_dag_apart(width: int) -> None:
    reports = two_round_reports()
    lines = render(jobs_tables(reports, 3, width=width), width)
    text = "\n".join(lines)
    for name in (
        f"demo_nlp_sweep / trial_a (run {FIRST_RUN})",
        f"demo_nlp_sweep / trial_a (run {SECOND_RUN})",
        "demo_research / pretrain",
    ):
        assert name_is_readable(name, lines), f"{name} at {width}:\n{text}"
    assert max(map(len, lines)) <= width
    # Status reasons name jobs as the table does.
    assert name_is_readable("Waiting for demo_research / pretrain to stop", lines), text
    assert "/-1/1" not in text
    # The JSON keeps the ids and gives each job its name and run label, as the REST API's Job does.
    assert [(r["displayName"], r["runLabel"]) for r in reports] == [
        ("demo_nlp_sweep / trial_a", FIRST_RUN),
        ("demo_nlp_sweep / trial_a", SECOND_RUN),
        ("demo_research / pretrain", FIRST_RUN),
    ]
