"""The deferred-task path on real Airflow processes: scheduler (hosting the allocator), dag processor,
triggerer and api-server, LocalExecutor, on PostgreSQL.

- Waiting jobs hold no worker slot: five jobs wait for one GPU, deferred, while another task runs; each
  is granted in turn and runs, one at a time.
- Reclaim: team-b borrows team-a's idle GPU; team-a's job arrives; the borrower, running in a worker,
  reads the allocator's signal, stops and waits again in the same try; team-a's job runs on the GPU it
  gave back; the borrower is granted again later and succeeds, without using an Airflow retry.
- A user marks a waiting task failed (the REST API, as the UI does): its job fails, and the allocator
  goes on granting the others.
- A bad request fails its own task: one the allocator cannot grant (an unknown share), and one found
  when the DAG file is parsed (a priority out of range), which leaves the file and its other tasks alone.

Each DAG has its own job queue, so the module triggers every run at once and each test waits for its own.
The Airflow is the one these stories share with the local and SageMaker reclaims (tests/airflow/stories.py);
they run first on it, as the marked-failed test must act while its job waits.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlalchemy as sa

from tests.airflow.harness import AirflowProcesses
from tests.airflow.stories import Stories

pytestmark = pytest.mark.airflow

#: The runs the tests read, triggered side by side when the module starts: (DAG, run id).
RUNS = (
    ("quota_marked_failed", "marked-1"),
    ("quota_slots", "slots-1"),
    ("quota_reclaim", "reclaim-1"),
    ("quota_bad_request", "bad-1"),
)


@pytest.fixture(scope="module")
def airflow(stories: Stories) -> AirflowProcesses:
    processes = stories.running()
    for dag_id, run_id in RUNS:
        processes.wait_for_dag(dag_id)
        processes.trigger(dag_id, run_id)
    return processes


def timeline(airflow: AirflowProcesses) -> list[dict[str, Any]]:
    path = Path(airflow.env["QUOTA_PROBE_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def events(airflow: AirflowProcesses, task: str, event: str) -> list[dict[str, Any]]:
    return [entry for entry in timeline(airflow) if entry["task"] == task and entry["event"] == event]


def finish_training(airflow: AirflowProcesses, task: str) -> None:
    """End ``task``'s probe training now (it reads its ``finish`` in the probe log)."""
    with Path(airflow.env["QUOTA_PROBE_LOG"]).open("a") as log:
        log.write(json.dumps({"task": task, "event": "finish", "t": time.time()}) + "\n")


def most_at_once(airflow: AirflowProcesses, tasks: tuple[str, ...]) -> int:
    """The most of ``tasks`` that trained at the same time: each start ends at its task's next stop or end."""
    changes = [
        (entry["t"], +1 if entry["event"] == "start" else -1)
        for entry in timeline(airflow)
        if entry["task"] in tasks and entry["event"] in ("start", "stop", "end")
    ]
    running = most = 0
    for _, change in sorted(changes):  # at a tie, an end (-1) before a start
        running += change
        most = max(most, running)
    return most


def finished(airflow: AirflowProcesses, dag_id: str, run_id: str) -> bool:
    return airflow.run_state(dag_id, run_id) in ("success", "failed")


def ledger(airflow: AirflowProcesses, sql: str, **params: Any) -> list[Any]:
    with airflow.engine.connect() as connection:
        return list(connection.execute(sa.text(sql), params))


def test_a_waiting_task_marked_failed_ends_its_job_and_the_others_are_still_granted(
    airflow: AirflowProcesses,
) -> None:
    waiting = "quota_marked_failed/marked-1/marked_failed/-1/1"
    status = "SELECT status, status_reason FROM quota_job WHERE job_id = :job_id"
    airflow.wait_for(
        "the job to wait for quota",
        lambda: [row[0] for row in ledger(airflow, status, job_id=waiting)] == ["RUNNABLE"],
        180,
    )

    marked = requests.patch(
        f"{airflow.base_url}/api/v2/dags/quota_marked_failed/dagRuns/marked-1/taskInstances/marked_failed",
        json={"new_state": "failed"},
        headers={"Authorization": f"Bearer {airflow.api_token()}"},
        timeout=30,
    )
    assert marked.status_code == 200, marked.text
    finish_training(airflow, "holds_both")  # the other waiter is granted once the holder is done
    airflow.wait_for(
        "the marked run to finish", lambda: finished(airflow, "quota_marked_failed", "marked-1"), 240
    )

    assert airflow.task_states("quota_marked_failed", "marked-1") == {
        "holds_both": ("success", 1),
        "waiters_arrive": ("success", 1),
        "marked_failed": ("failed", 1),
        "granted_after": ("success", 1),
    }, airflow.log_tails()
    airflow.wait_for_ledger_to_settle(waiting)
    [(job_status, reason)] = ledger(airflow, status, job_id=waiting)
    assert (job_status, reason) == ("FAILED", "Its task try 1 failed while it waited for quota")
    assert not events(airflow, "marked_failed", "start")  # never granted


def test_waiting_jobs_hold_no_worker_slot_and_are_granted_one_at_a_time(airflow: AirflowProcesses) -> None:
    airflow.wait_for("the slots run to finish", lambda: finished(airflow, "quota_slots", "slots-1"), 240)

    states = airflow.task_states("quota_slots", "slots-1")
    assert states == {task: ("success", 1) for task in [*(f"probe{i}" for i in range(5)), "canary"]}, (
        airflow.log_tails()
    )
    runs = sorted(
        (start["t"], end["t"])
        for i in range(5)
        for start, end in zip(
            events(airflow, f"probe{i}", "start"), events(airflow, f"probe{i}", "end"), strict=True
        )
    )
    assert len(runs) == 5
    # One GPU: no two jobs ever trained at once.
    for (_, previous_end), (next_start, _) in itertools.pairwise(runs):
        assert next_start >= previous_end
    # The canary ran while at least four of the five jobs were still waiting, deferred.
    canary_at = events(airflow, "canary", "ran")[0]["t"]
    assert sum(start > canary_at for start, _ in runs) >= 4
    granted = ledger(
        airflow, "SELECT count(*) FROM quota_audit_log WHERE kind = 'GRANTED' AND job_id LIKE 'quota_slots/%'"
    )
    assert granted[0][0] == 5


def test_team_a_reclaims_its_gpu_from_a_borrower_running_in_a_worker(airflow: AirflowProcesses) -> None:
    airflow.wait_for(
        "the borrower to train again after team-a's job",
        lambda: (
            len(events(airflow, "b_borrow", "start")) == 2 or finished(airflow, "quota_reclaim", "reclaim-1")
        ),
        300,
    )
    for task in ("b_own", "b_borrow"):  # the story is told: their trainings end now, not after 60 and 45 s
        finish_training(airflow, task)
    airflow.wait_for(
        "the reclaim run to finish", lambda: finished(airflow, "quota_reclaim", "reclaim-1"), 300
    )

    states = airflow.task_states("quota_reclaim", "reclaim-1")
    assert states == {
        "b_own": ("success", 1),
        "b_borrow": ("success", 1),  # preempted and resumed in the same try: no Airflow retry used
        "b_later": ("success", 1),
        "a_arrives_later": ("success", 1),
        "a_job": ("success", 1),
    }, airflow.log_tails()
    borrower_id = "quota_reclaim/reclaim-1/b_borrow/-1/1"
    lender_id = "quota_reclaim/reclaim-1/a_job/-1/1"
    stop = events(airflow, "b_borrow", "stop")
    assert [entry["preempted_by"] for entry in stop] == [lender_id], timeline(airflow)
    assert not events(airflow, "b_own", "stop")  # the job on team-b's own GPU is never the victim
    # Two GPUs: never more than two of the queue's jobs trained at once.
    assert most_at_once(airflow, ("b_own", "b_borrow", "a_job")) == 2
    a_start = events(airflow, "a_job", "start")[0]["t"]
    a_end = events(airflow, "a_job", "end")[0]["t"]
    borrower_starts = [entry["t"] for entry in events(airflow, "b_borrow", "start")]
    assert len(borrower_starts) == 2
    # Two-phase: team-a's job starts only after the borrower stopped; the borrower resumes after it.
    assert stop[0]["t"] <= a_start
    assert borrower_starts[1] >= a_end
    preempted = ledger(
        airflow,
        "SELECT job_id, related_job_id, rule FROM quota_audit_log WHERE kind = 'PREEMPTED' AND job_id = :j",
        j=borrower_id,
    )
    assert [tuple(row) for row in preempted] == [(borrower_id, lender_id, "RECLAIM")]
    airflow.wait_for_ledger_to_settle(borrower_id)
    row = ledger(
        airflow,
        "SELECT status, attempt, preempted_attempt_count FROM quota_job WHERE job_id = :j",
        j=borrower_id,
    )
    assert tuple(row[0]) == ("SUCCEEDED", 2, 1)


def test_a_request_for_an_unknown_share_or_a_bad_priority_fails_its_own_task(
    airflow: AirflowProcesses,
) -> None:

    airflow.wait_for(
        "the bad-request run to finish", lambda: finished(airflow, "quota_bad_request", "bad-1"), 180
    )

    assert airflow.task_states("quota_bad_request", "bad-1") == {
        "unknown_share": ("failed", 1),
        "fine": ("success", 1),
        "priority_out_of_range": ("failed", 1),  # and the file's other tasks ran
    }
    rejected = events(airflow, "unknown_share", "rejected")
    # How the task failed, if not by the allocator's rejection (a CI run once saw no rejection event).
    why = airflow.task_log("quota_bad_request", "bad-1", "unknown_share") + airflow.log_tails()
    assert len(rejected) == 1, why
    assert "team-z" in rejected[0]["reason"]
    assert "team-a" in rejected[0]["reason"]  # and which shares exist
    log = airflow.task_log("quota_bad_request", "bad-1", "priority_out_of_range")
    assert "schedulingPriority is 10000: it must be a whole number from 0 to 9999" in log
