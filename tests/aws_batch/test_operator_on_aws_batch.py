"""QuotaTrainingOperator on a job queue AWS Batch schedules, driven as the task runner drives it.

The admission event ``{"scheduler": "AWS_BATCH"}`` (what the allocator sends a task waiting on such a
queue) makes the task submit an AWS Batch service job to its quota share and wait on it; the same DAG,
on a queue our allocator schedules, waits for a grant instead. The operator's real code runs against the
emulator; only the task instance and its ``task_state_store`` are stand-ins (``task_runtime``).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from airflow_quota.operators.arguments import attempt_seconds
from airflow_quota.operators.batch_backend import SERVICE_JOB_XCOM_KEY
from airflow_quota.operators.links import (
    TRAINING_JOB_XCOM_KEY,
    BatchServiceJobLink,
    SageMakerTrainingJobLink,
)
from airflow_quota.operators.training import QuotaTrainingOperator
from airflow_quota.triggers.admission import QuotaAdmissionTrigger
from airflow_quota.triggers.batch_service_job import BatchServiceJobTrigger
from tests.aws_batch.conftest import UNIT, create_design, quota_file, share, submit
from tests.aws_batch.test_emulator import status, wait_for
from tests.sagemaker.conftest import training_request
from tests.sagemaker.moto_process import REGION
from tests.sagemaker.task_runtime import TaskInstanceStandIn, TaskRun

HANDED_TO_AWS_BATCH = {"scheduler": "AWS_BATCH"}


@pytest.fixture
def queue(batch: Any, unique: str) -> str:
    name = f"gpu-{unique}"
    create_design(
        batch, quota_file(name, 4, share("research", "LEND", 2), share("nlp", "LEND_AND_BORROW", 2))
    )
    return name


def task_run(
    queue: str, unique: str, *, share_name: str, count: int, duration_s: str, **kwargs: Any
) -> TaskRun:
    request = training_request(instance_type=UNIT, instance_count=count, duration_s=0)
    request["HyperParameters"]["emulator.duration_s"] = duration_s
    operator = QuotaTrainingOperator(
        task_id="train",
        job_queue=queue,
        quota_share_name=share_name,
        training_job_config=request,
        scheduling_priority=0,
        poll_interval=0.2,
        settle_seconds=0,
        **kwargs,
    )
    return TaskRun(operator, TaskInstanceStandIn(dag_id="nlp_pipeline", run_id=f"run-{unique}"))


def event_of(deferred: TaskDeferred) -> dict[str, Any]:
    trigger = deferred.trigger
    assert isinstance(trigger, BatchServiceJobTrigger)

    async def first() -> dict[str, Any]:
        return dict((await anext(trigger.run())).payload)

    return asyncio.run(asyncio.wait_for(first(), 60))


def test_the_task_runs_as_a_service_job_preempted_and_resumed_by_aws_batch_in_one_try(
    batch: Any, queue: str, unique: str
) -> None:
    run = task_run(queue, unique, share_name="nlp", count=4, duration_s="60,0.2")
    waiting = run.execute()
    assert isinstance(waiting.trigger, QuotaAdmissionTrigger)  # the same start as on our allocator's queues

    following = run.resume_deferred(waiting, HANDED_TO_AWS_BATCH)
    job_id = run.ti.xcom[SERVICE_JOB_XCOM_KEY]["job_id"]
    described = batch.describe_service_job(jobId=job_id)
    assert (described["quotaShareName"], described["schedulingPriority"]) == ("nlp", 0)
    assert "timeoutConfig" not in described  # no attempt_timeout: AWS Batch's default
    assert json.loads(described["serviceRequestPayload"])["CheckpointConfig"]["S3Uri"].endswith("/")

    wait_for("the job to run", lambda: status(batch, job_id) == "RUNNING")
    submit(batch, queue, "research-train", "research", 2, duration_s="0.2")  # research takes its GPUs back
    event = event_of(following)

    result = run.resume(following, event)
    assert result["service_job_id"] == job_id and result["attempts"] == 2
    [preemption] = result["preemptions"]
    assert "RECLAIM" in preemption["status_reason"]
    assert result["training_job_arn"] != preemption["training_job_arn"]
    # The task's extra links: its service job in the AWS Batch console, its last attempt's training job.
    assert BatchServiceJobLink().format_link(**run.ti.xcom[SERVICE_JOB_XCOM_KEY]) == (
        f"https://console.aws.amazon.com/batch/home?region={REGION}#jobs/detail/{job_id}"
    )
    training_job_name = result["training_job_arn"].rsplit("/", 1)[-1]
    assert SageMakerTrainingJobLink().format_link(**run.ti.xcom[TRAINING_JOB_XCOM_KEY]) == (
        f"https://console.aws.amazon.com/sagemaker/home?region={REGION}#/jobs/{training_job_name}"
    )
    assert {link.name for link in run.operator.operator_extra_links} >= {
        "AWS Batch service job",
        "SageMaker training job",
    }


def test_a_retried_try_does_not_submit_a_second_service_job(batch: Any, queue: str, unique: str) -> None:
    run = task_run(queue, unique, share_name="research", count=1, duration_s="60")
    run.resume_deferred(run.execute(), HANDED_TO_AWS_BATCH)
    first = run.ti.xcom[SERVICE_JOB_XCOM_KEY]["job_id"]

    retry = run.retry()
    retry.resume_deferred(retry.execute(), HANDED_TO_AWS_BATCH)
    assert retry.ti.xcom[SERVICE_JOB_XCOM_KEY]["job_id"] == first
    listed = batch.list_service_jobs(jobQueue=queue, filters=[{"name": "JOB_NAME", "values": ["*"]}])
    assert [job["jobId"] for job in listed["jobSummaryList"]] == [first]

    retry.operator.on_kill()  # killed while its worker runs: the service job is terminated
    ended = wait_for(
        "the job to fail", lambda: (d := batch.describe_service_job(jobId=first))["status"] == "FAILED" and d
    )
    assert ended["isTerminated"] is True


def test_a_local_backend_task_on_an_aws_batch_queue_fails_saying_why(queue: str, unique: str) -> None:
    operator = QuotaTrainingOperator(
        task_id="train",
        job_queue=queue,
        quota_share_name="research",
        training_job_config={"ResourceConfig": {"InstanceType": "local-gpu", "InstanceCount": 1}},
        backend="local",
        entry_point=["true"],
    )
    run = TaskRun(operator, TaskInstanceStandIn(dag_id="nlp_pipeline", run_id=f"run-{unique}"))
    with pytest.raises(AirflowFailException, match=f"Job queue {queue} is scheduled by AWS Batch"):
        run.resume(run.execute(), HANDED_TO_AWS_BATCH)


def test_attempt_timeout_is_the_service_jobs_timeout_config(batch: Any, queue: str, unique: str) -> None:
    run = task_run(
        queue, unique, share_name="research", count=1, duration_s="60", attempt_timeout=timedelta(seconds=1)
    )
    following = run.resume_deferred(run.execute(), HANDED_TO_AWS_BATCH)
    job_id = run.ti.xcom[SERVICE_JOB_XCOM_KEY]["job_id"]
    assert batch.describe_service_job(jobId=job_id)["timeoutConfig"] == {"attemptDurationSeconds": 1}

    # The emulator stops an attempt that runs longer, and the job fails (no retry of the attempt).
    with pytest.raises(AirflowException, match=r"timeoutConfig\.attemptDurationSeconds \(1 s\)"):
        run.resume(following, event_of(following))


@pytest.mark.parametrize(
    "attempt_timeout",
    [0, -5, 1.5, "3600", True, timedelta(milliseconds=1500), timedelta(0)],
    ids=["zero", "negative", "fraction", "text", "bool", "fractional timedelta", "zero timedelta"],
)
def test_a_bad_attempt_timeout_fails_the_task_naming_it(
    queue: str, unique: str, attempt_timeout: Any
) -> None:
    run = task_run(
        queue, unique, share_name="research", count=1, duration_s="1", attempt_timeout=attempt_timeout
    )
    with pytest.raises(AirflowFailException, match="attempt_timeout: must be a whole number of seconds >= 1"):
        run.execute()


@pytest.mark.parametrize(
    ("attempt_timeout", "seconds"), [(3600, 3600), (timedelta(hours=12), 43200), (None, None)]
)
def test_attempt_timeout_in_seconds(attempt_timeout: Any, seconds: int | None) -> None:
    assert attempt_seconds(attempt_timeout) == seconds
