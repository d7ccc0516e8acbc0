"""What a job's task instance says about the job's try: each way a try ends reads in its own words.

The task instance rows below are what Airflow 3.3 leaves (checked against its code and, in
tests/db/test_task_try_stories.py, produced by its own functions): a try archived for a retry or a clear
gets a new task instance id at once and keeps its try number until the next try is scheduled.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_quota.allocator.reconcile import (
    Outcome,
    TaskOutcome,
    TaskView,
    cleared_by_allocator,
    task_outcome,
)

JOB_TI = "0196a2c0-0000-7000-8000-000000000001"
NEXT_TI = "0196a2c0-0000-7000-8000-000000000002"


def view(state: str | None, *, try_number: int = 1, ti_id: str = JOB_TI, **extra: object) -> TaskView:
    return TaskView(state=state, try_number=try_number, ti_id=ti_id, **extra)  # type: ignore[arg-type]


ENDED = TaskOutcome.ENDED
CASES = [
    pytest.param(view("running"), Outcome(TaskOutcome.ACTIVE), id="a running try goes on"),
    pytest.param(view("deferred"), Outcome(TaskOutcome.ACTIVE), id="a deferred try goes on"),
    pytest.param(view("success"), Outcome(TaskOutcome.SUCCEEDED, "Its task succeeded"), id="success"),
    pytest.param(view("failed"), Outcome(ENDED, "Its task try 1 failed"), id="a try that failed for good"),
    pytest.param(
        view("up_for_retry", ti_id=NEXT_TI, try_events=frozenset({"up_for_retry"})),
        Outcome(ENDED, "Its task try 1 failed; it is up for retry"),
        id="a try its runner reported failed, up for retry (its id already rotated): failed, not cleared",
    ),
    pytest.param(
        view("up_for_retry", ti_id=NEXT_TI),
        Outcome(ENDED, "Its task try 1 failed; it is up for retry"),
        id="a deferred try the triggerer failed, up for retry (no event): failed",
    ),
    pytest.param(
        view("queued", try_number=2, ti_id=NEXT_TI, try_events=frozenset({"failed"})),
        Outcome(ENDED, "Its task try 1 failed; the task instance is now at try 2"),
        id="a failed try whose retry already runs: failed",
    ),
    pytest.param(
        view("failed", try_events=frozenset({"heartbeat timeout", "failed"})),
        Outcome(
            ENDED,
            "Its task try 1 lost its task runner: no heartbeat within the scheduler's timeout "
            "(its worker or task runner died)",
        ),
        id="a try whose task runner stopped heartbeating: a lost runner",
    ),
    pytest.param(
        view("up_for_retry", ti_id=NEXT_TI, try_events=frozenset({"heartbeat timeout", "failed"})),
        Outcome(
            ENDED,
            "Its task try 1 lost its task runner: no heartbeat within the scheduler's timeout "
            "(its worker or task runner died); it is up for retry",
        ),
        id="a lost runner with retries left: a lost runner, up for retry",
    ),
    pytest.param(
        view("failed", try_events=frozenset({"state mismatch", "failed"})),
        Outcome(
            ENDED,
            "Its task try 1 lost its task runner: its process ended while the task ran (killed, or out of "
            "memory)",
        ),
        id="a try whose process the executor saw end while it ran: a lost runner",
    ),
    pytest.param(
        view("restarting", ti_id=NEXT_TI),
        Outcome(ENDED, "Its task try 1 was cleared while it ran", cleared=True),
        id="a running try cleared by a user",
    ),
    pytest.param(
        view(None, ti_id=NEXT_TI),
        Outcome(ENDED, "Its task try 1 was cleared", cleared=True),
        id="a waiting try cleared by a user",
    ),
    pytest.param(
        view("scheduled", try_number=2, ti_id=NEXT_TI),
        Outcome(ENDED, "Its task try 1 was cleared; the task instance is now at try 2", cleared=True),
        id="a cleared try whose next try is scheduled already",
    ),
    pytest.param(
        view(None, ti_id=NEXT_TI, scheduler_gone=True),
        Outcome(
            ENDED,
            "Its task try 1 was reset: the scheduler running it stopped and the next one could not adopt it",
        ),
        id="a try reset by a restarted scheduler: reset, not cleared",
    ),
    pytest.param(
        view("running", try_number=2, ti_id=NEXT_TI, try_events=frozenset({"success"})),
        Outcome(TaskOutcome.SUCCEEDED, "Its task succeeded"),
        id="a try that succeeded before the task instance moved on succeeded",
    ),
    pytest.param(
        view("upstream_failed"),
        Outcome(ENDED, "Its task try 1 failed: an upstream task failed"),
        id="an upstream failure",
    ),
    pytest.param(
        None,
        Outcome(ENDED, "Its task instance no longer exists (its DAG run was deleted)"),
        id="a deleted DAG run",
    ),
]


@pytest.mark.parametrize(("task", "expected"), CASES)
def test_the_outcome_of_a_jobs_try_says_what_ended_it(task: TaskView | None, expected: Outcome) -> None:
    assert task_outcome(1, JOB_TI, task) == expected


def test_a_try_the_allocator_cleared_says_so_and_why() -> None:
    assert cleared_by_allocator(2, timedelta(minutes=10)) == Outcome(
        ENDED,
        "Its task try 2 was cleared by the quota allocator: it had not stopped within 600 s of being told to "
        "(stop_deadline)",
        cleared=True,
    )
