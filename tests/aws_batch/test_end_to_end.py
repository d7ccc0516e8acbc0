"""The same DAGs on a job queue AWS Batch schedules, on real Airflow processes (scheduler with the allocator,
triggerer, dag processor, api-server; LocalExecutor; SQLite), AWS Batch and SageMaker being moto's server
with our emulators.

The quota file is tests/sagemaker's with one line more, ``scheduler: AWS_BATCH``; its design is created in
the emulator as ``airflow quota export --format aws`` prints it. The allocator hands each waiting task to
AWS Batch and holds nothing for it; each task submits a service job and follows it:

* the SageMaker end-to-end story, unchanged DAGs: team-b's job borrows team-a's idle instance, team-a's
  job reclaims it, AWS Batch (the emulator) preempts the borrower's service job and runs its second
  attempt on the same checkpoint prefix once team-a's is done; both tasks succeed in their first try;
* a task marked failed while it waits on its service job terminates the job (its trigger's ``on_kill``);
* a try that fails while its service job still runs (here AWS Batch unreachable from the triggerer) is
  retried, and the retry follows the same service job instead of submitting a second one.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
import sqlalchemy as sa
import yaml

from airflow_quota.backends.sagemaker import TaskIdentity
from airflow_quota.triggers.batch_service_job import KILLED_REASON
from tests.airflow.harness import AirflowProcesses, free_port
from tests.aws_batch.conftest import create_design
from tests.sagemaker.moto_process import REGION, emulator_connection

pytestmark = pytest.mark.airflow

HERE = Path(__file__).parent
SAGEMAKER_TESTS = HERE.parent / "sagemaker"
QUEUE = "gpu-training"


def quota_file() -> dict[str, Any]:
    """tests/sagemaker's quota file, its job queue scheduled by AWS Batch."""
    document: dict[str, Any] = yaml.safe_load((SAGEMAKER_TESTS / "quotas.yaml").read_text())
    document["jobQueues"][0]["scheduler"] = "AWS_BATCH"
    return document


@pytest.fixture(scope="module")
def batch(endpoint_url: str) -> Any:
    return boto3.client("batch", endpoint_url=endpoint_url, region_name=REGION)


@pytest.fixture(scope="module")
def sagemaker(endpoint_url: str) -> Any:
    return boto3.client("sagemaker", endpoint_url=endpoint_url, region_name=REGION)


@pytest.fixture(scope="module")
def airflow(
    endpoint_url: str, batch: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AirflowProcesses]:
    home = tmp_path_factory.mktemp("airflow-home-aws-batch")
    dags = home / "dags"
    dags.mkdir()
    shutil.copy(SAGEMAKER_TESTS / "dags" / "quota_sagemaker_reclaim.py", dags)  # the same DAGs
    shutil.copy(HERE / "dags" / "quota_batch_long.py", dags)
    quotas = home / "quotas.yaml"
    quotas.write_text(yaml.safe_dump(quota_file()))
    create_design(batch, quota_file())
    processes = AirflowProcesses(
        home,
        f"sqlite:///{home}/airflow.db",
        extra_env={**emulator_connection(endpoint_url), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)},
    )
    processes.migrate()
    applied = processes.airflow("quota", "apply", "-f", str(quotas))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    processes.start()
    try:
        yield processes
    finally:
        processes.stop()


def task_key(dag_id: str, run_id: str) -> str:
    """The service job's name (and its training jobs' prefix) for the DAG's ``train`` task."""
    return TaskIdentity(dag_id, run_id, "train", -1, 1).task_key


def service_jobs(batch: Any, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every service job of the DAG run's ``train`` task, described."""
    listed = batch.list_service_jobs(
        jobQueue=QUEUE, filters=[{"name": "JOB_NAME", "values": [task_key(dag_id, run_id)]}]
    )
    return [batch.describe_service_job(jobId=job["jobId"]) for job in listed["jobSummaryList"]]


def training_job(sagemaker: Any, name: str) -> tuple[str, str]:
    described = sagemaker.describe_training_job(TrainingJobName=name)
    return described["TrainingJobStatus"], described["CheckpointConfig"]["S3Uri"]


def following(airflow: AirflowProcesses, dag_id: str, run_id: str) -> bool:
    """The task waits deferred on its service job's trigger."""
    with airflow.engine.connect() as connection:
        row = connection.execute(
            sa.text("SELECT state, next_method FROM task_instance WHERE dag_id = :d AND run_id = :r"),
            {"d": dag_id, "r": run_id},
        ).first()
    return row is not None and tuple(row) == ("deferred", "on_service_job")


def running_job(airflow: AirflowProcesses, batch: Any, dag_id: str, run_id: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        jobs = service_jobs(batch, dag_id, run_id)
        if len(jobs) == 1 and jobs[0]["status"] == "RUNNING" and following(airflow, dag_id, run_id):
            return jobs[0]
        return None

    return airflow.wait_for(f"{dag_id}'s service job to run, its task following it", probe, 180)


def trigger_log(airflow: AirflowProcesses, dag_id: str, run_id: str, attempt: int = 1) -> str:
    """What the task's triggers wrote (the triggerer's own file beside the try's log)."""
    folder = airflow.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=train"
    files = folder.glob(f"attempt={attempt}.log.trigger.*")
    return "".join(path.read_text(errors="replace") for path in files)


def finished(airflow: AirflowProcesses, dag_id: str, run_id: str, timeout: float = 300) -> None:
    airflow.wait_for(
        f"{dag_id} to finish", lambda: airflow.run_state(dag_id, run_id) in ("success", "failed"), timeout
    )


def return_value(airflow: AirflowProcesses, dag_id: str, run_id: str) -> dict[str, Any]:
    with airflow.engine.connect() as connection:
        value = connection.execute(
            sa.text("SELECT value FROM xcom WHERE dag_id = :d AND run_id = :r AND key = 'return_value'"),
            {"d": dag_id, "r": run_id},
        ).scalar_one()
    return dict(json.loads(value) if isinstance(value, str) else value)


def test_the_owner_reclaims_its_instance_from_a_borrower_aws_batch_preempted(
    airflow: AirflowProcesses, batch: Any, sagemaker: Any
) -> None:
    airflow.wait_for_dag("quota_sm_borrower")
    airflow.wait_for_dag("quota_sm_owner")
    airflow.trigger("quota_sm_borrower", "e2e-1")
    borrowing = running_job(airflow, batch, "quota_sm_borrower", "e2e-1")
    assert borrowing["capacityUsage"] == [{"capacityUnit": "ml.g5.xlarge", "quantity": 2.0}]  # one borrowed
    airflow.trigger("quota_sm_owner", "e2e-1")

    for dag_id in ("quota_sm_owner", "quota_sm_borrower"):
        finished(airflow, dag_id, "e2e-1")

    assert airflow.task_states("quota_sm_owner", "e2e-1") == {"train": ("success", 1)}, airflow.log_tails()
    # Preempted and resumed by AWS Batch in the same try: no Airflow retry used.
    assert airflow.task_states("quota_sm_borrower", "e2e-1") == {"train": ("success", 1)}, airflow.log_tails()
    [borrower] = service_jobs(batch, "quota_sm_borrower", "e2e-1")
    [owner] = service_jobs(batch, "quota_sm_owner", "e2e-1")
    assert (borrower["status"], owner["status"]) == ("SUCCEEDED", "SUCCEEDED")
    assert borrower["jobId"] == borrowing["jobId"]  # one service job for the task, two attempts
    [preempted] = borrower["preemptionSummary"]["recentPreemptedAttempts"]
    assert preempted["statusReason"] == f"Preempted by {owner['jobId']} (RECLAIM)"
    first, second = (f"{task_key('quota_sm_borrower', 'e2e-1')}-a{attempt}" for attempt in (1, 2))
    assert preempted["serviceResourceId"]["value"].endswith(f"training-job/{first}")
    assert training_job(sagemaker, first)[0] == "Stopped"
    assert training_job(sagemaker, second)[0] == "Completed"
    assert training_job(sagemaker, first)[1] == training_job(sagemaker, second)[1]  # the same checkpoint
    result = return_value(airflow, "quota_sm_borrower", "e2e-1")
    assert (result["service_job_id"], result["attempts"]) == (borrower["jobId"], 2)
    assert [each["status_reason"] for each in result["preemptions"]] == [preempted["statusReason"]]
    assert result["training_job_arn"].endswith(f"training-job/{second}")
    # The allocator held nothing: AWS Batch scheduled both jobs.
    with airflow.engine.connect() as connection:
        assert connection.execute(sa.text("SELECT count(*) FROM quota_job")).scalar_one() == 0
    # The CLI shows them, read from AWS Batch.
    listed = quota_cli(airflow, "jobs", "list", "--queue", QUEUE, "--output", "json")
    assert {(job["jobId"], job["status"], job["scheduledBy"]) for job in listed["serviceJobs"][QUEUE]} == {
        (borrower["jobId"], "SUCCEEDED", "AWS_BATCH"),
        (owner["jobId"], "SUCCEEDED", "AWS_BATCH"),
    }
    [snapshot] = quota_cli(airflow, "snapshot", "--queue", QUEUE, "--output", "json")["jobQueues"]
    assert (snapshot["scheduledBy"], snapshot["capacityUsage"]) == ("AWS_BATCH", [])  # both have ended
    assert [share["quotaShareName"] for share in snapshot["quotaShares"]] == ["team-a", "team-b"]
    table = airflow.airflow("quota", "jobs", "list", "--queue", QUEUE)
    assert f"Service jobs of job queue {QUEUE} (scheduled by AWS Batch)" in table.stdout, table.stderr


def quota_cli(airflow: AirflowProcesses, *args: str) -> Any:
    result = airflow.airflow("quota", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_a_task_marked_failed_while_it_follows_its_service_job_terminates_it(
    airflow: AirflowProcesses, batch: Any
) -> None:
    airflow.wait_for_dag("quota_batch_kill")
    airflow.trigger("quota_batch_kill", "kill-1")
    job = running_job(airflow, batch, "quota_batch_kill", "kill-1")
    airflow.wait_for(  # the triggerer runs the trigger (only a running trigger is told it was killed)
        "the trigger to follow the service job",
        lambda: f"Service job {job['jobId']}: RUNNING" in trigger_log(airflow, "quota_batch_kill", "kill-1"),
        120,
    )

    marked = requests.patch(
        f"{airflow.base_url}/api/v2/dags/quota_batch_kill/dagRuns/kill-1/taskInstances/train",
        json={"new_state": "failed"},
        headers={"Authorization": f"Bearer {airflow.api_token()}"},
        timeout=60,
    )
    assert marked.status_code == 200, marked.text

    ended = airflow.wait_for(
        "the service job to be terminated",
        lambda: (
            (described := batch.describe_service_job(jobId=job["jobId"]))["status"] == "FAILED" and described
        ),
        120,
    )
    assert ended["isTerminated"] is True
    assert KILLED_REASON in ended["statusReason"]
    assert airflow.task_states("quota_batch_kill", "kill-1") == {"train": ("failed", 1)}


def test_a_retried_try_follows_the_service_job_of_the_try_that_failed(
    airflow: AirflowProcesses, batch: Any
) -> None:
    """The triggerer cannot reach AWS Batch: each try's trigger gives up and the try fails, while the
    service job runs on. The retry re-attaches to it: one service job, never terminated."""
    unreachable = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {
            "region_name": REGION,
            "endpoint_url": f"http://127.0.0.1:{free_port()}",  # nothing listens there
            "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
        },
    }
    airflow.kill("triggerer")
    airflow.start_process("triggerer", ["triggerer"], AIRFLOW_CONN_AWS_DEFAULT=json.dumps(unreachable))
    airflow.wait_for_dag("quota_batch_retry")
    airflow.trigger("quota_batch_retry", "retry-1")

    finished(airflow, "quota_batch_retry", "retry-1")

    states = airflow.task_states("quota_batch_retry", "retry-1")
    assert states == {"train": ("failed", 2)}, airflow.log_tails()
    [job] = service_jobs(batch, "quota_batch_retry", "retry-1")
    assert (job["status"], job["isTerminated"]) == ("RUNNING", False)
    logs = {
        attempt: path.read_text(errors="replace")
        for attempt in (1, 2)
        for path in (airflow.home / "logs").glob(f"dag_id=quota_batch_retry/**/attempt={attempt}.log")
    }
    assert f"Submitted service job {job['jobId']}" in logs[1]
    assert f"Re-attaching to service job {job['jobId']} (RUNNING)" in logs[2]
    batch.terminate_service_job(jobId=job["jobId"], reason="the test is over")
