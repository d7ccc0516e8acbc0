"""The operator's AWS Batch strategy against the emulator: the SubmitServiceJob request it builds, a
retried try re-attaching through ``clientToken`` (whether AWS answers a repeated token with the first job
or rejects it, as its documentation says: the emulator does, except in ``REPLAYING_REGION``), and the
monitoring trigger following a preemption and terminating the job when killed. Calls go through the amazon
provider's Batch hook and Airflow's ``aws_default`` connection (pointed at the emulator)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import boto3
import pytest
from airflow.sdk.exceptions import AirflowException
from botocore.exceptions import ClientError

from airflow_quota.backends.sagemaker import TaskIdentity, TrainingRequestError
from airflow_quota.hooks.batch_service_job import CLIENT_TOKEN_TAG, BatchServiceJobHook
from airflow_quota.operators.batch_backend import (
    SERVICE_JOB_KEY,
    BatchBackend,
    ServiceJobSpec,
    client_token,
    service_job_request,
)
from airflow_quota.operators.sagemaker_backend import SageMakerBackend
from airflow_quota.triggers.batch_service_job import KILLED_REASON, BatchServiceJobTrigger
from tests.aws_batch.conftest import UNIT, AnswerLog, checked, create_design, quota_file, share, submit
from tests.aws_batch.regions import REPLAYING_REGION
from tests.aws_batch.test_emulator import attempt_arn, status, training_job_name, wait_for
from tests.sagemaker.conftest import finish_training, training_request
from tests.sagemaker.moto_process import REGION
from tests.sagemaker.task_runtime import TaskInstanceStandIn, TaskStateStoreStandIn


def identity(unique: str, try_number: int = 1) -> TaskIdentity:
    return TaskIdentity("train_dag", f"manual__{unique}", "finetune", -1, try_number)


def request_for(
    unique: str, spec: ServiceJobSpec, *, try_number: int = 1, duration_s: str = "1", **kw: Any
) -> dict[str, Any]:
    training = training_request(instance_type=UNIT, instance_count=kw.pop("count", 1), stop_delay_s=0.3)
    training["HyperParameters"]["emulator.duration_s"] = duration_s
    return service_job_request(training, identity(unique, try_number), spec, **kw)


@pytest.fixture
def queue(batch: Any, unique: str) -> str:
    name = f"gpu-{unique}"
    create_design(
        batch, quota_file(name, 4, share("research", "LEND", 2), share("nlp", "LEND_AND_BORROW", 2))
    )
    return name


def test_the_request_carries_the_quota_fields_and_priority_0() -> None:
    spec = ServiceJobSpec(
        "gpu",
        "nlp",
        scheduling_priority=0,
        preemption_retries_before_termination=3,
        attempt_duration_seconds=43200,
    )
    request = request_for("r1", spec)  # botocore's validator has checked it
    task = identity("r1")

    assert request["schedulingPriority"] == 0
    assert request["quotaShareName"] == "nlp" and request["jobQueue"] == "gpu"
    assert request["preemptionConfiguration"] == {"preemptionRetriesBeforeTermination": 3}
    assert request["timeoutConfig"] == {"attemptDurationSeconds": 43200}
    assert "timeoutConfig" not in request_for("r1", ServiceJobSpec("gpu", "nlp"))  # AWS's default then
    assert request["clientToken"] == f"{task.task_key}-s0" == client_token(identity("r1", try_number=2))
    assert request["tags"][CLIENT_TOKEN_TAG] == request["clientToken"]  # how a rejected repeat finds it
    payload = json.loads(request["serviceRequestPayload"])
    assert payload["CheckpointConfig"]["S3Uri"] == f"s3://team-a-models/llm/checkpoints/{task.task_key}/"
    assert payload["ResourceConfig"]["InstanceType"] == UNIT
    assert request["tags"]["airflow-quota:quota-share"] == "nlp"
    assert {tag["Key"]: tag["Value"] for tag in payload["Tags"]}["airflow-quota:task-id"] == "finetune"


def _any(value: Any) -> Any:
    return value


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        # Values as a DAG may render them from templates: text, a fraction.
        (ServiceJobSpec("gpu", "nlp", preemption_retries_before_termination=_any("3")), "preemptionRetries"),
        (ServiceJobSpec("gpu", "nlp", attempt_duration_seconds=_any(1.5)), "attemptDurationSeconds"),
    ],
    ids=["retries as text", "fractional timeout"],
)
def test_a_request_botocore_refuses_is_a_training_request_error(spec: ServiceJobSpec, problem: str) -> None:
    with pytest.raises(TrainingRequestError) as refused:
        request_for("r2", spec)
    assert problem in str(refused.value) and "Invalid type" in str(refused.value)


def test_a_retried_try_reattaches_and_a_new_generation_submits_again(
    queue: str, unique: str, answers: AnswerLog
) -> None:
    jobs = service_jobs(answers)
    spec = ServiceJobSpec(queue, "nlp")
    first, created = jobs.submit(request_for(unique, spec, try_number=1, duration_s="30"))
    assert created and first["status"] in ("RUNNABLE", "STARTING", "RUNNING")

    again, created = jobs.submit(request_for(unique, spec, try_number=2, duration_s="30"))
    assert (again["jobId"], created) == (first["jobId"], False)

    jobs.terminate(first["jobId"], "ended for the test")
    fresh, created = jobs.submit(request_for(unique, spec, try_number=2, duration_s="30", generation=1))
    assert created and fresh["jobId"] != first["jobId"]
    jobs.terminate(fresh["jobId"], "ended for the test")
    # The hook's client is checked as well (the repeat was rejected, as AWS documents: no answer to check).
    assert answers.checked["SubmitServiceJob"] == 2


@pytest.mark.parametrize(
    "region", [REPLAYING_REGION, REGION], ids=["a repeat answers the first job", "a repeat is rejected"]
)
def test_a_try_that_crashed_before_keeping_its_job_id_reattaches(
    endpoint_url: str, unique: str, answers: AnswerLog, region: str
) -> None:
    """The crash window: SubmitServiceJob succeeded but the try died before ``task_state_store`` kept the
    job id; the retry sends the same request (the same ``clientToken``) and must find that job, whether
    AWS answers it again or rejects the repeat (what its documentation says)."""
    batch = checked(boto3.client("batch", endpoint_url=endpoint_url, region_name=region), answers)
    queue = f"gpu-{unique}"
    create_design(batch, quota_file(queue, 2, share("research", "LEND", 2)))
    backend = strategy(answers, region)
    spec = ServiceJobSpec(queue, "research")
    training = training_request(instance_type=UNIT, instance_count=1, duration_s=30)

    def a_try(try_number: int) -> Any:  # each with its own store: the first try's never kept the id
        ti = TaskInstanceStandIn("train_dag", f"manual__{unique}", try_number=try_number)
        return {"ti": ti, "task_state_store": TaskStateStoreStandIn()}

    first, retry = a_try(1), a_try(2)
    job = backend.launch(first, backend.prepare(training, first), spec)
    request = service_job_request(backend.prepare(training, retry).document, identity_of(retry), spec)
    if region != REPLAYING_REGION:  # what the retry meets on such an AWS
        with pytest.raises(ClientError, match="was already used by an identical request") as refused:
            batch.submit_service_job(**request)
        assert refused.value.response["Error"]["Code"] == "ClientException"

    again = backend.launch(retry, backend.prepare(training, retry), spec)
    assert again["jobId"] == job["jobId"]
    described, created = backend.jobs.submit(request)
    assert (described["jobId"], created) == (job["jobId"], False)
    listed = batch.list_service_jobs(jobQueue=queue, filters=[{"name": "JOB_NAME", "values": ["*"]}])
    assert [summary["jobId"] for summary in listed["jobSummaryList"]] == [job["jobId"]]
    backend.request_stop(job["jobId"], "ended for the test")


def test_a_client_exception_that_is_no_repeat_stands(
    queue: str, unique: str, answers: AnswerLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It looks for a job of the request's clientToken first (AWS's rejection of a repeat gives no reason to
    # tell it from this one), for FIND_SUBMITTED_TIMEOUT: a minute, which here would only be waited out.
    monkeypatch.setattr(BatchServiceJobHook, "FIND_SUBMITTED_TIMEOUT", 3.0)
    jobs = service_jobs(answers)
    with pytest.raises(ClientError, match="'marketing' is not a quota share"):
        jobs.submit(request_for(unique, ServiceJobSpec(queue, "marketing")))


def test_the_trigger_follows_a_preemption_to_the_end(
    batch: Any, queue: str, unique: str, answers: AnswerLog, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = service_jobs(answers)
    borrower, _ = jobs.submit(request_for(unique, ServiceJobSpec(queue, "nlp"), count=4, duration_s="60,0.2"))
    job_id = borrower["jobId"]
    wait_for("the borrower to run", lambda: status(batch, job_id) == "RUNNING")
    first_attempt = jobs.describe(job_id)["latestAttempt"]["serviceResourceId"]["value"]
    submit(batch, queue, "research-train", "research", 2, duration_s="0.2")

    trigger = BatchServiceJobTrigger(job_id=job_id, poll_interval=0.2)
    trigger._jobs = lambda: jobs  # type: ignore[method-assign]  # its calls' answers are checked too

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    capsys.readouterr()
    event = asyncio.run(asyncio.wait_for(first_event(), timeout=60))

    assert event["status"] == "SUCCEEDED" and event["attempts"] == 2
    [preemption] = event["preemptions"]
    assert preemption["training_job_arn"] == first_attempt
    assert "RECLAIM" in preemption["status_reason"]
    assert event["training_job_arn"] not in (None, first_attempt)
    logged = capsys.readouterr().out  # the trigger's log (Airflow's structlog writes it to stdout here)
    assert f"attempt on training job {first_attempt} preempted" in logged
    assert f"attempt 2 runs training job {event['training_job_arn']}" in logged
    assert "SUCCEEDED" in logged


def test_killing_the_trigger_terminates_the_service_job(
    batch: Any, queue: str, unique: str, answers: AnswerLog
) -> None:
    jobs = service_jobs(answers)
    job, _ = jobs.submit(request_for(unique, ServiceJobSpec(queue, "research"), duration_s="60"))
    wait_for("the job to start", lambda: status(batch, job["jobId"]) in ("STARTING", "RUNNING"))

    asyncio.run(BatchServiceJobTrigger(job_id=job["jobId"]).on_kill())

    ended = wait_for(
        "the job to fail", lambda: (d := jobs.describe(job["jobId"]))["status"] == "FAILED" and d
    )
    assert ended["isTerminated"] is True and ended["statusReason"] == KILLED_REASON


def test_the_trigger_serializes_what_it_needs() -> None:
    trigger = BatchServiceJobTrigger(
        job_id="j-1",
        aws_conn_id="aws_batch",
        region_name="eu-west-1",
        poll_interval=5,
        not_before="2026-12-01",
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_quota.triggers.batch_service_job.BatchServiceJobTrigger"
    # A deferred task's row in a live metadata DB holds these kwargs: they never change.
    assert kwargs == {
        "job_id": "j-1",
        "aws_conn_id": "aws_batch",
        "region_name": "eu-west-1",
        "poll_interval": 5,
        "not_before": "2026-12-01",
    }
    rebuilt = BatchServiceJobTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)


def test_a_priority_change_reaches_aws_batch(batch: Any, unique: str, answers: AnswerLog) -> None:
    queue = f"gpu-{unique}"
    create_design(batch, quota_file(queue, 1, share("team", "RESERVE", 1)))
    jobs = service_jobs(answers)
    running, _ = jobs.submit(request_for(unique, ServiceJobSpec(queue, "team"), duration_s="30"))
    waiting, _ = jobs.submit(request_for(f"{unique}-2", ServiceJobSpec(queue, "team"), duration_s="1"))
    assert waiting["schedulingPriority"] == 0

    jobs.update_priority(waiting["jobId"], 50)
    assert jobs.describe(waiting["jobId"])["schedulingPriority"] == 50
    for job in (running, waiting):
        jobs.terminate(job["jobId"], "ended for the test")


# --- the strategy the operator calls, with the task runtime's stand-ins ---------------------------------


def service_jobs(answers: AnswerLog) -> BatchServiceJobHook:
    """The service-job hook of ``aws_default``, each answer it parses checked like ``batch``'s."""
    jobs = BatchServiceJobHook(aws_conn_id="aws_default")
    checked(jobs.client, answers)
    return jobs


def identity_of(context: Any) -> TaskIdentity:
    from airflow_quota.operators.backend import task_identity

    return task_identity(context)


def strategy(answers: AnswerLog, region_name: str | None = None) -> BatchBackend:
    """The strategy through the ``aws_default`` connection (its region unless ``region_name``); the
    answers its Batch client parses are checked."""
    log = logging.getLogger("airflow.task")
    sagemaker = SageMakerBackend(
        aws_conn_id="aws_default",
        region_name=region_name,
        verify=None,
        botocore_config=None,
        input_data_config=None,
        poll_interval=0.2,
        stop_poll_interval=0.1,
        stop_timeout=30,
        settle_seconds=0,
        log=log,
    )
    backend = BatchBackend(
        sagemaker=sagemaker,
        aws_conn_id="aws_default",
        region_name=region_name,
        poll_interval=0.2,
        settle_seconds=0,
        log=log,
    )
    checked(backend.jobs.client, answers)
    return backend


def run_trigger(trigger: BatchServiceJobTrigger, jobs: BatchServiceJobHook) -> dict[str, Any]:
    """The trigger's one event, its calls made through ``jobs`` (whose answers are checked)."""
    trigger._jobs = lambda: jobs  # type: ignore[method-assign]

    async def first() -> dict[str, Any]:
        return dict((await anext(trigger.run())).payload)

    return asyncio.run(asyncio.wait_for(first(), 60))


def test_a_task_launches_one_service_job_its_retries_reattach_and_it_ends_with_the_jobs_result(
    batch: Any, sagemaker: Any, queue: str, unique: str, answers: AnswerLog
) -> None:
    backend = strategy(answers)
    spec = ServiceJobSpec(queue, "research", scheduling_priority=0)
    store = TaskStateStoreStandIn()
    first_try: Any = {"ti": TaskInstanceStandIn("train_dag", f"manual__{unique}"), "task_state_store": store}
    training = training_request(instance_type=UNIT, instance_count=1, duration_s=60)
    prepared = backend.prepare(training, first_try)

    job = backend.launch(first_try, prepared, spec)
    retry: Any = {
        "ti": TaskInstanceStandIn("train_dag", f"manual__{unique}", try_number=2),
        "task_state_store": store,
    }
    assert backend.launch(retry, backend.prepare(training, retry), spec)["jobId"] == job["jobId"]
    crashed_before_keeping_it: Any = {**retry, "task_state_store": TaskStateStoreStandIn()}
    assert backend.launch(crashed_before_keeping_it, prepared, spec)["jobId"] == job["jobId"]

    # Every try has reattached to the job still training: its training ends.
    wait_for("the job's attempt", lambda: "latestAttempt" in batch.describe_service_job(jobId=job["jobId"]))
    finish_training(sagemaker, training_job_name(attempt_arn(batch, job["jobId"])))
    result = backend.finish(run_trigger(backend.monitor(job["jobId"]), backend.jobs))
    assert result["service_job_id"] == job["jobId"] and result["attempts"] == 1
    assert result["training_job_arn"].endswith("-a1") and result["preemptions"] == []

    # Its job has ended: a later try trains again, as a new service job (the next clientToken).
    third: Any = {
        "ti": TaskInstanceStandIn("train_dag", f"manual__{unique}", try_number=3),
        "task_state_store": store,
    }
    again = backend.launch(third, prepared, spec)
    assert again["jobId"] != job["jobId"] and store.get(SERVICE_JOB_KEY)["generation"] == 1
    backend.request_stop(again["jobId"], "ended for the test")


def test_a_failed_service_job_fails_the_task_with_its_reason(
    batch: Any, queue: str, unique: str, answers: AnswerLog
) -> None:
    backend = strategy(answers)
    context: Any = {
        "ti": TaskInstanceStandIn("train_dag", f"manual__{unique}"),
        "task_state_store": TaskStateStoreStandIn(),
    }
    training = training_request(
        instance_type=UNIT,
        instance_count=1,
        duration_s=0.5,
        outcome="Failed",
        failure_reason="AlgorithmError: OOM",
    )
    job = backend.launch(context, backend.prepare(training, context), ServiceJobSpec(queue, "research"))

    with pytest.raises(
        AirflowException,
        match=f"Service job {job['jobId']} is FAILED: Training job Failed: AlgorithmError: OOM",
    ):
        backend.finish(run_trigger(backend.monitor(job["jobId"]), backend.jobs))
