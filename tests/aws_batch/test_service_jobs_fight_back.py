"""AWS Batch service jobs against an emulator that fights back (issue 35, item 6 and "an emulator that fights
back"): the retry strategy AWS's SDK sends, the task's ``verify``, region and ``botocore_config`` on every
client and the trigger, ListServiceJobs paged and never sent ``jobStatus`` beside a ``JOB_NAME`` filter,
a rejected repeated ``clientToken`` whose job List answers show only later, throttling and server errors,
the SUBMITTED / PENDING / RUNNABLE / SCHEDULED / STARTING states in order, and insufficient capacity
retried by AWS Batch. Each of the first five failed on the code before the fix."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from airflow_quota.aws_batch.service_job_priority import find_service_job
from airflow_quota.hooks.batch_service_job import BatchServiceJobHook
from airflow_quota.operators.batch_backend import (
    DEFAULT_RETRY_STRATEGY,
    BatchBackend,
    ServiceJobSpec,
    service_job_request,
)
from airflow_quota.operators.sagemaker_backend import SageMakerBackend
from airflow_quota.triggers.batch_service_job import BatchServiceJobTrigger
from tests.aws_batch.conftest import (
    UNIT,
    AnswerLog,
    checked,
    create_design,
    emulator_behaviour,
    quota_file,
    share,
    submit,
)
from tests.aws_batch.test_batch_backend import identity, request_for, run_trigger
from tests.sagemaker.conftest import training_request
from tests.waiting import wait_for


def backend(**aws: Any) -> BatchBackend:
    aws.setdefault("region_name", None)
    log = logging.getLogger("airflow.task")
    sagemaker = SageMakerBackend(
        aws_conn_id="aws_default",
        region_name=aws.get("region_name"),
        verify=aws.get("verify"),
        botocore_config=aws.get("botocore_config"),
        input_data_config=None,
        poll_interval=0.2,
        stop_poll_interval=0.1,
        stop_timeout=30,
        settle_seconds=0,
        log=log,
    )
    return BatchBackend(
        sagemaker=sagemaker, aws_conn_id="aws_default", poll_interval=0.2, settle_seconds=0, log=log, **aws
    )


def test_a_service_job_gets_the_retry_strategy_aws_sdk_sends_unless_the_task_gives_one() -> None:
    request = request_for("r1", ServiceJobSpec("gpu", "nlp"))
    assert request["retryStrategy"] == DEFAULT_RETRY_STRATEGY
    assert [rule["action"] for rule in request["retryStrategy"]["evaluateOnExit"]] == ["RETRY", "EXIT"]
    sdk = pytest.importorskip("sagemaker.train.aws_batch.constants")
    assert request["retryStrategy"] == sdk.DEFAULT_SAGEMAKER_TRAINING_RETRY_CONFIG

    mine = {"attempts": 3, "evaluateOnExit": [{"action": "RETRY", "onStatusReason": "*InternalServerError*"}]}
    assert request_for("r1", ServiceJobSpec("gpu", "nlp", retry_strategy=mine))["retryStrategy"] == mine


def test_verify_region_and_botocore_config_reach_the_batch_client_and_the_trigger() -> None:
    aws = {"region_name": "eu-west-1", "verify": False, "botocore_config": {"read_timeout": 7}}
    strategy = backend(**aws)
    client = strategy.jobs.conn
    assert client.meta.region_name == "eu-west-1" and client.meta.config.read_timeout == 7
    assert strategy.jobs.verify is False

    trigger = strategy.monitor("j-1")
    _, kwargs = trigger.serialize()
    assert {key: kwargs[key] for key in aws} == aws
    rebuilt = BatchServiceJobTrigger(**kwargs)._jobs()  # in the triggerer, from the row's kwargs
    assert rebuilt.conn.meta.region_name == "eu-west-1" and rebuilt.conn.meta.config.read_timeout == 7
    assert rebuilt.verify is False


def test_a_job_looked_up_by_name_is_found_on_any_page_without_a_status_beside_the_name_filter(
    batch: Any, unique: str, endpoint_url: str
) -> None:
    queue = f"paged-{unique}"
    emulator_behaviour(endpoint_url, queue, serviceJobs={"pageSize": 1})
    create_design(batch, quota_file(queue, 1, share("team", "RESERVE", 1)))
    running = submit(batch, queue, "finetune", "team", 1, duration_s="60")
    for _ in range(2):  # two later jobs of the same name, ended: the newest, listed first
        batch.terminate_service_job(jobId=submit(batch, queue, "finetune", "team", 1), reason="test")
    sent: list[dict[str, Any]] = []
    batch.meta.events.register(
        "provide-client-params.batch.ListServiceJobs", lambda params, **_: sent.append(dict(params))
    )

    found = find_service_job(batch, "finetune", [queue])

    assert found is not None and found["jobId"] == running  # the unfinished one, on the third page
    assert all("jobStatus" not in params for params in sent if params.get("filters"))
    assert any(params.get("nextToken") for params in sent)
    batch.terminate_service_job(jobId=running, reason="test")


def test_a_rejected_repeat_finds_its_job_once_list_answers_show_it(
    batch: Any, unique: str, endpoint_url: str, answers: AnswerLog
) -> None:
    queue = f"lagging-{unique}"
    emulator_behaviour(endpoint_url, queue, serviceJobs={"listLagSeconds": 3})
    create_design(batch, quota_file(queue, 2, share("team", "RESERVE", 2)))
    training = training_request(instance_type=UNIT, instance_count=1, duration_s=30)
    request = service_job_request(training, identity(unique), ServiceJobSpec(queue, "team"))
    first = batch.submit_service_job(**request)["jobId"]  # the try that crashed before keeping the id

    hook = BatchServiceJobHook(aws_conn_id="aws_default")
    checked(hook.conn, answers)
    described, created = hook.submit(request)  # rejected (AWS's documented answer); listed 3 s later

    assert (described["jobId"], created) == (first, False)
    hook.terminate(first, "test")


def test_throttling_and_server_errors_beyond_botocores_retries_are_asked_again(
    batch: Any, unique: str, endpoint_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = f"throttled-{unique}"
    create_design(batch, quota_file(queue, 2, share("team", "RESERVE", 2)))
    emulator_behaviour(
        endpoint_url,
        queue,
        serviceJobs={
            "throttle": {"SubmitServiceJob": 2, "ListServiceJobs": 1},
            "serverErrors": {"DescribeServiceJob": 2},
        },
    )
    monkeypatch.setattr(BatchServiceJobHook, "CALL_DELAY", 0.05)
    # botocore's own retries off (the task's botocore_config reaches the client): each error reaches us.
    strategy = backend(botocore_config={"retries": {"mode": "standard", "max_attempts": 1}})
    training = training_request(instance_type=UNIT, instance_count=1, duration_s=30)

    described, created = strategy.jobs.submit(
        service_job_request(training, identity(unique), ServiceJobSpec(queue, "team"))
    )

    assert created and described["status"] in ("RUNNABLE", "STARTING", "RUNNING")
    strategy.jobs.terminate(described["jobId"], "test")


def test_a_job_walks_submitted_pending_runnable_scheduled_then_starts_and_the_trigger_follows_it(
    batch: Any, unique: str, endpoint_url: str, answers: AnswerLog, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = f"states-{unique}"
    emulator_behaviour(
        endpoint_url,
        queue,
        serviceJobs={"submittedSeconds": 0.6, "pendingSeconds": 0.6, "scheduledSeconds": 0.5},
    )
    create_design(batch, quota_file(queue, 1, share("team", "RESERVE", 1)))
    blocker = submit(batch, queue, "blocker", "team", 1, duration_s="2")
    job_id = submit(batch, queue, "waits", "team", 1, duration_s="1.5")
    seen: list[str] = []

    def ended() -> bool:
        now = str(batch.describe_service_job(jobId=job_id)["status"])
        if not seen or seen[-1] != now:
            seen.append(now)
        return now == "SUCCEEDED"

    wait_for("the job to succeed", ended, timeout_s=60)

    assert seen[:4] == ["SUBMITTED", "PENDING", "RUNNABLE", "SCHEDULED"]
    assert seen[-2:] == ["RUNNING", "SUCCEEDED"] and set(seen[4:-2]) <= {"STARTING"}
    assert status_of(batch, blocker) == "SUCCEEDED"

    # The trigger follows a job through the same states.
    hook = BatchServiceJobHook(aws_conn_id="aws_default")
    checked(hook.conn, answers)
    again = submit(batch, queue, "followed", "team", 1, duration_s="1")
    capsys.readouterr()
    event = run_trigger(BatchServiceJobTrigger(job_id=again, poll_interval=0.1), hook)
    assert event["status"] == "SUCCEEDED"
    logged = capsys.readouterr().out
    assert all(word in logged for word in ("SUBMITTED", "PENDING", "SCHEDULED", "SUCCEEDED"))


def status_of(batch: Any, job_id: str) -> str:
    return str(batch.describe_service_job(jobId=job_id)["status"])


def test_insufficient_capacity_is_retried_by_aws_batch_without_using_an_attempt(
    batch: Any, sagemaker: Any, unique: str, endpoint_url: str, answers: AnswerLog
) -> None:
    queue = f"capacity-{unique}"
    emulator_behaviour(endpoint_url, queue, serviceJobs={"insufficientCapacity": 2})
    create_design(batch, quota_file(queue, 1, share("team", "RESERVE", 1)))
    request = service_job_request(
        training_request(instance_type=UNIT, instance_count=1, duration_s=0.5),
        identity(unique),
        ServiceJobSpec(queue, "team"),  # retryStrategy.attempts 1: no attempt to spare
    )
    hook = BatchServiceJobHook(aws_conn_id="aws_default")
    checked(hook.conn, answers)
    described, _ = hook.submit(request)

    event = run_trigger(BatchServiceJobTrigger(job_id=described["jobId"], poll_interval=0.1), hook)

    assert event["status"] == "SUCCEEDED"
    ended = hook.describe(described["jobId"])
    # AWS keeps the latest capacity-failed attempt (earlier ones deleted on a best-effort basis).
    capacity_failed, succeeded = ended["attempts"]
    assert "CapacityError" in capacity_failed["statusReason"]
    assert succeeded["serviceResourceId"]["value"] == event["training_job_arn"]
    # Every attempt's training job has a name of its own, whatever AWS Batch names them (undocumented).
    names = {a["serviceResourceId"]["value"].rsplit("/", 1)[-1] for a in ended["attempts"]}
    assert len(names) == 2
    assert json.loads(ended["serviceRequestPayload"])["TrainingJobName"] not in names


def test_a_job_runnable_too_long_for_a_named_reason_is_terminated_by_the_queues_time_limit_action(
    batch: Any, unique: str
) -> None:
    queue = f"limited-{unique}"
    create_design(batch, quota_file(queue, 1, share("team", "RESERVE", 1)))
    batch.update_job_queue(
        jobQueue=queue,
        jobStateTimeLimitActions=[
            {
                "reason": "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE",
                "state": "RUNNABLE",
                "maxTimeSeconds": 1,
                "action": "TERMINATE",
            }
        ],
    )
    too_big = submit(batch, queue, "too-big", "team", 2)  # more than the service environment holds

    ended = wait_for(
        "the time limit action",
        lambda: (d := batch.describe_service_job(jobId=too_big))["status"] == "FAILED" and d,
    )
    reason = "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE"
    assert ended["statusReason"] == f"Terminated by JobStateTimeLimit action due to reason: {reason}"
