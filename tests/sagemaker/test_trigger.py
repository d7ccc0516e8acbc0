"""The monitoring trigger under asyncio, against the server: one event per end, and on_kill stops the job."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_quota.backends.sagemaker import SageMakerTrainingJobs
from airflow_quota.triggers.sagemaker import SageMakerTrainingJobTrigger
from tests.sagemaker.conftest import training_request
from tests.sagemaker.moto_fixture import MotoServer


def launch(name: str, **kwargs: Any) -> None:
    SageMakerTrainingJobs("aws_default").launch({**training_request(**kwargs), "TrainingJobName": name})


def trigger_for(name: str) -> SageMakerTrainingJobTrigger:
    return SageMakerTrainingJobTrigger(training_job_name=name, aws_conn_id="aws_default", poll_interval=0.1)


async def events_of(trigger: SageMakerTrainingJobTrigger, timeout: float = 10) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [event.payload async for event in trigger.run()]

    return await asyncio.wait_for(collect(), timeout)


def test_it_round_trips_through_serialize() -> None:
    trigger = trigger_for("job-a1")
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_quota.triggers.sagemaker.SageMakerTrainingJobTrigger"
    # A deferred task's row in a live metadata DB holds these kwargs: they never change.
    assert kwargs == {
        "training_job_name": "job-a1",
        "aws_conn_id": "aws_default",
        "region_name": None,
        "poll_interval": 0.1,
        "not_before": None,
    }
    assert SageMakerTrainingJobTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_a_completed_job_fires_one_completed_event(moto_server: MotoServer, unique: str) -> None:
    name = f"trigger-completed-{unique}"
    launch(name, duration_s=0.4)

    events = asyncio.run(events_of(trigger_for(name)))

    assert len(events) == 1
    assert events[0]["status"] == "Completed"
    assert events[0]["training_job_name"] == name
    assert events[0]["training_job_arn"].endswith(f"training-job/{name}")
    assert events[0]["model_artifacts"] == f"s3://team-a-models/llm/{name}/output/model.tar.gz"


def test_a_failed_job_fires_failed_with_its_reason(moto_server: MotoServer, unique: str) -> None:
    name = f"trigger-failed-{unique}"
    launch(name, duration_s=0.3, outcome="Failed", failure_reason="AlgorithmError: CUDA out of memory")

    [event] = asyncio.run(events_of(trigger_for(name)))

    assert (event["status"], event["failure_reason"]) == ("Failed", "AlgorithmError: CUDA out of memory")


def test_a_job_past_its_runtime_limit_fires_stopped_max_runtime_exceeded(
    moto_server: MotoServer, unique: str
) -> None:
    name = f"trigger-timeout-{unique}"
    launch(name, duration_s=60, max_runtime_s=1)

    [event] = asyncio.run(events_of(trigger_for(name)))

    assert (event["status"], event["secondary_status"]) == ("Stopped", "MaxRuntimeExceeded")


def test_no_event_fires_before_not_before(moto_server: MotoServer, unique: str) -> None:
    name = f"trigger-settle-{unique}"
    launch(name, duration_s=0.1)
    time.sleep(0.2)  # already Completed when the trigger starts (as after a re-attach)
    not_before = datetime.now(UTC) + timedelta(seconds=1.5)
    trigger = SageMakerTrainingJobTrigger(
        training_job_name=name, poll_interval=0.1, not_before=not_before.isoformat()
    )

    [event] = asyncio.run(events_of(trigger))

    assert event["status"] == "Completed"
    assert datetime.now(UTC) >= not_before


def test_a_job_that_does_not_exist_fires_missing(moto_server: MotoServer, unique: str) -> None:
    [event] = asyncio.run(events_of(trigger_for(f"never-launched-{unique}")))
    assert event["status"] == "Missing"


def test_on_kill_stops_the_training_job(moto_server: MotoServer, unique: str) -> None:
    name = f"trigger-killed-{unique}"
    # A 60 s stop: on a loaded machine the hook took 13 s to send it, so a 5 s one was over first.
    launch(name, duration_s=120, stop_delay_s=60)
    trigger = trigger_for(name)

    async def run_then_kill() -> None:
        # As the triggerer does: cancel the running trigger, then await its on_kill.
        task = asyncio.create_task(events_of(trigger))
        await asyncio.sleep(0.3)
        task.cancel()
        await trigger.on_kill()

    asyncio.run(run_then_kill())

    # on_kill asked SageMaker to stop the job and did not wait for the stop to end (a stopped job's event
    # is test_a_job_past_its_runtime_limit_fires_stopped_max_runtime_exceeded's).
    status = moto_server.client().describe_training_job(TrainingJobName=name)["TrainingJobStatus"]
    assert status == "Stopping"


def test_the_monitoring_trigger_a_sagemaker_job_defers_on_uses_the_tasks_verify_and_botocore_config() -> None:
    from airflow_quota.operators.sagemaker_backend import SageMakerBackend

    backend = SageMakerBackend(
        aws_conn_id="aws_default",
        region_name="us-east-1",
        verify="/etc/ssl/company-ca.pem",
        botocore_config={"retries": {"max_attempts": 7}},
        input_data_config=None,
        poll_interval=5.0,
        stop_poll_interval=1.0,
        stop_timeout=60.0,
        settle_seconds=0.0,
        log=logging.getLogger("test"),
    )

    _, kwargs = backend.monitor("job-1").serialize()

    assert (kwargs["verify"], kwargs["botocore_config"]) == (
        "/etc/ssl/company-ca.pem",
        {"retries": {"max_attempts": 7}},
    )
