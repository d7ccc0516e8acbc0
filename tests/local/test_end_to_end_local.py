"""QuotaTrainingOperator with the local backend on real Airflow processes (scheduler hosting the allocator,
triggerer, dag processor, api-server; LocalExecutor; PostgreSQL), its trainings real processes.

team-b trains on its own GPU and borrows team-a's idle one; team-a's job arrives; the allocator signals
the borrower, whose task, running in the worker, SIGTERMs its process group; the training checkpoints and
exits; the task waits for quota again in the same try. team-a's job trains on the device index the
borrower freed; the borrower is granted again, resumes at its checkpoint step and ends with the result
of an uninterrupted run. Nothing is mocked.
"""

from __future__ import annotations

import json
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from airflow_quota.backends.sagemaker import TaskIdentity
from tests.airflow.harness import AirflowProcesses
from tests.airflow.stories import Stories

pytestmark = pytest.mark.airflow

HERE = Path(__file__).parent
TRAIN_COUNTER = HERE.parents[1] / "examples" / "training" / "train_counter.py"
BORROWER_STEPS = 150  # tests/local/dags/quota_local_reclaim.py
RUN_ID = "e2e-1"


@pytest.fixture(scope="module")
def airflow(stories: Stories) -> AirflowProcesses:
    """The Airflow this story shares with the scheduler's and SageMaker's (tests/airflow/stories.py); its job
    queue (tests/local/quotas.yaml), DAG file and training log are its own."""
    return stories.running()


def notes(airflow: AirflowProcesses) -> list[dict[str, Any]]:
    path = Path(airflow.env["QUOTA_LOCAL_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def notes_of(airflow: AirflowProcesses, job_part: str, event: str) -> list[dict[str, Any]]:
    """The notes of the trainings whose name contains ``job_part`` (a task key), in order."""
    return [entry for entry in notes(airflow) if job_part in entry["job"] and entry["event"] == event]


def task_key(dag_id: str, task_id: str) -> str:
    """The part every training job name of the task instance shares (``<task key>-t<try>-a<attempt>``)."""
    return TaskIdentity(dag_id, RUN_ID, task_id, -1, 1).task_key


def uninterrupted_value(steps: int) -> int:
    next_value: Callable[[int, int], int] = runpy.run_path(str(TRAIN_COUNTER))["next_value"]
    value = 1
    for step in range(1, steps + 1):
        value = next_value(value, step)
    return value


def test_team_a_reclaims_its_gpu_from_a_local_borrower_that_resumes_from_its_checkpoint(
    airflow: AirflowProcesses,
) -> None:
    airflow.wait_for_dag("quota_local_borrower")
    airflow.wait_for_dag("quota_local_owner")
    own, borrow = task_key("quota_local_borrower", "own"), task_key("quota_local_borrower", "borrow")
    owner = task_key("quota_local_owner", "train")
    airflow.trigger("quota_local_borrower", RUN_ID)
    airflow.wait_for(
        "team-b's two trainings to start",
        lambda: notes_of(airflow, own, "start") and notes_of(airflow, borrow, "start"),
        120,
    )
    airflow.trigger("quota_local_owner", RUN_ID)

    for dag_id in ("quota_local_owner", "quota_local_borrower"):
        airflow.wait_for(
            f"{dag_id} to finish",
            lambda d=dag_id: airflow.run_state(d, RUN_ID) in ("success", "failed"),
            150,
        )

    # Preempted and resumed in the same try: no Airflow retry used.
    assert airflow.task_states("quota_local_owner", RUN_ID) == {"train": ("success", 1)}, airflow.log_tails()
    assert airflow.task_states("quota_local_borrower", RUN_ID) == {
        "own": ("success", 1),
        "borrow": ("success", 1),
    }, airflow.log_tails()
    [own_start] = notes_of(airflow, own, "start")
    borrow_starts = notes_of(airflow, borrow, "start")
    borrow_exits = notes_of(airflow, borrow, "exit")
    [owner_start] = notes_of(airflow, owner, "start")
    assert [entry["job"] for entry in borrow_starts] == [f"{borrow}-t1-a1", f"{borrow}-t1-a2"]

    # Two GPUs, two indices: team-b's trainings had one each; team-a's got the one the borrower freed.
    assert {own_start["devices"], borrow_starts[0]["devices"]} == {"0", "1"}
    assert owner_start["devices"] == borrow_starts[0]["devices"]
    # The borrower stopped on SIGTERM after saving its checkpoint, before team-a's training started.
    first_exit = borrow_exits[0]
    assert (first_exit["job"], first_exit["code"]) == (f"{borrow}-t1-a1", 143)
    assert 0 < first_exit["step"] < BORROWER_STEPS
    assert first_exit["t"] <= owner_start["t"]
    # It resumed at its checkpoint step, in the same checkpoint directory, and ended as if never stopped.
    assert borrow_starts[1]["resumed_from"] == first_exit["step"]
    assert borrow_starts[1]["checkpoint_dir"] == borrow_starts[0]["checkpoint_dir"]
    result = json.loads((Path(borrow_starts[1]["model_dir"]) / "result.json").read_text())
    assert result == {"steps": BORROWER_STEPS, "value": uninterrupted_value(BORROWER_STEPS)}
    assert [entry["code"] for entry in borrow_exits] == [143, 0]

    # The training's output streamed into the task's log, and the preemption is in it.
    log = airflow.task_log("quota_local_borrower", RUN_ID, "borrow")
    assert f"step {first_exit['step']}/{BORROWER_STEPS}" in log
    assert f"SIGTERM: checkpoint saved at step {first_exit['step']}" in log
    assert f"resuming from checkpoint at step {first_exit['step']}" in log

    borrower_id = f"quota_local_borrower/{RUN_ID}/borrow/-1/1"
    owner_id = f"quota_local_owner/{RUN_ID}/train/-1/1"
    airflow.wait_for_ledger_to_settle(borrower_id)
    with airflow.engine.connect() as connection:
        preempted = connection.execute(
            sa.text(
                "SELECT related_job_id, rule FROM quota_audit_log WHERE kind = 'PREEMPTED' AND job_id = :j"
            ),
            {"j": borrower_id},
        ).all()
        job = connection.execute(
            sa.text("SELECT status, attempt, preempted_attempt_count FROM quota_job WHERE job_id = :j"),
            {"j": borrower_id},
        ).one()
    assert [tuple(row) for row in preempted] == [(owner_id, "RECLAIM")]
    assert tuple(job) == ("SUCCEEDED", 2, 1)
