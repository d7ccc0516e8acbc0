"""QuotaTrainingOperator on real Airflow processes (scheduler with the allocator, triggerer, dag processor,
api-server; LocalExecutor; PostgreSQL), its SageMaker being moto's server with our emulator.

team-b's training job borrows team-a's idle instance; team-a's job arrives (it waits from the triggerer:
its request has no template); the allocator preempts the borrower while it is deferred on its monitoring
trigger and asks SageMaker to stop its training job; the task, resumed with the preemption, waits until
the job is Stopped and waits for quota again in the same try; team-a's job runs; then team-b's is granted
again and its second training job, on the same checkpoint prefix, completes. Nothing is mocked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.airflow.harness import AirflowProcesses
from tests.airflow.stories import Stories
from tests.sagemaker.moto_fixture import MotoServer

pytestmark = pytest.mark.airflow

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def airflow(stories: Stories) -> AirflowProcesses:
    """The Airflow this story shares with the scheduler's and the local backend's (tests/airflow/stories.py);
    its job queue (tests/sagemaker/quotas.yaml) and DAG file are its own."""
    return stories.running()


def training_jobs(moto_server: MotoServer) -> dict[str, tuple[str, str]]:
    client = moto_server.client()
    jobs = {}
    # Every job whose name has the prefix (moto applies MaxResults before NameContains, and the run's other
    # tests' jobs share the server).
    for summary in client.list_training_jobs(NameContains="quota-sm-")["TrainingJobSummaries"]:
        name = summary["TrainingJobName"]
        if name.startswith("quota-sm-"):
            described = client.describe_training_job(TrainingJobName=name)
            jobs[name] = (described["TrainingJobStatus"], described["CheckpointConfig"]["S3Uri"])
    return jobs


def monitoring(airflow: AirflowProcesses, dag_id: str, run_id: str) -> bool:
    with airflow.engine.connect() as connection:
        row = connection.execute(
            sa.text("SELECT state, next_method FROM task_instance WHERE dag_id = :d AND run_id = :r"),
            {"d": dag_id, "r": run_id},
        ).first()
    return row is not None and tuple(row) == ("deferred", "on_monitor")


def test_the_owner_reclaims_its_instance_from_a_sagemaker_borrower(
    airflow: AirflowProcesses, stories: Stories
) -> None:
    moto_server = stories.moto
    airflow.wait_for_dag("quota_sm_borrower")
    airflow.wait_for_dag("quota_sm_owner")
    airflow.trigger("quota_sm_borrower", "e2e-1")
    borrower_first = airflow.wait_for(
        "the borrower's first training job to run",
        lambda: [name for name, (status, _) in training_jobs(moto_server).items() if status == "InProgress"],
        120,
    )
    airflow.wait_for(
        "the borrower to defer on its monitoring trigger (after its launching run's follow time)",
        lambda: monitoring(airflow, "quota_sm_borrower", "e2e-1"),
        60,
    )
    airflow.trigger("quota_sm_owner", "e2e-1")

    for dag_id in ("quota_sm_owner", "quota_sm_borrower"):
        airflow.wait_for(
            f"{dag_id} to finish",
            lambda d=dag_id: airflow.run_state(d, "e2e-1") in ("success", "failed"),
            240,
        )

    assert airflow.task_states("quota_sm_owner", "e2e-1") == {"train": ("success", 1)}, airflow.log_tails()
    # Preempted and resumed in the same try: no Airflow retry used.
    assert airflow.task_states("quota_sm_borrower", "e2e-1") == {"train": ("success", 1)}, airflow.log_tails()
    jobs = training_jobs(moto_server)
    [first] = borrower_first
    assert first.endswith("-t1-a1")
    second = first.removesuffix("-a1") + "-a2"
    assert jobs[first][0] == "Stopped"
    assert jobs[second][0] == "Completed"
    assert jobs[first][1] == jobs[second][1]  # the same checkpoint prefix
    owner = [name for name in jobs if name not in (first, second)]
    assert [jobs[name][0] for name in owner] == ["Completed"]
    airflow.wait_for_ledger_to_settle("quota_sm_borrower/e2e-1/train/-1/1")
    with airflow.engine.connect() as connection:
        row = connection.execute(
            sa.text("SELECT status, attempt, preempted_attempt_count FROM quota_job WHERE job_id = :j"),
            {"j": "quota_sm_borrower/e2e-1/train/-1/1"},
        ).one()
    assert tuple(row) == ("SUCCEEDED", 2, 1)
    # The allocator asked SageMaker to stop the borrower's job itself, right after deciding, without
    # waiting for the borrower's task to run again.
    scheduler_log = (airflow.home / "logs" / "scheduler.log").read_text(errors="replace")
    # The allocator's lines, not its tasks' (those name their dag_id). When its StopTrainingJob call timed out
    # after SageMaker took it, botocore's retry is told the job is already stopping: still its request.
    asked = (f"Asked SageMaker to stop training job {first}", f"Training job {first} needs no stop: ")
    allocator_lines = [line for line in scheduler_log.splitlines() if "dag_id=" not in line]
    assert any(words in line for line in allocator_lines for words in asked), airflow.log_tails()
    # The owner waited from the triggerer and its job ended within its launch run: one worker run.
    with airflow.engine.connect() as connection:
        worker_runs = {
            dag_id: connection.execute(
                sa.text("SELECT count(*) FROM log WHERE dag_id = :d AND event = 'running'"), {"d": dag_id}
            ).scalar_one()
            for dag_id in ("quota_sm_owner", "quota_sm_borrower")
        }
    # The borrower: execute, on_grant (launch), on_monitor (preempted), on_grant (its 2 s job ends there).
    assert worker_runs == {"quota_sm_owner": 1, "quota_sm_borrower": 4}
