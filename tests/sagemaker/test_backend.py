"""The SageMaker backend: names, requests, tags, checkpoints; then launch, stop, orphans on the server."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from airflow_quota.backends import sagemaker
from airflow_quota.backends.sagemaker import (
    MAX_TRAINING_JOB_NAME_LENGTH,
    TRAINING_JOB_NAME_PATTERN,
    SageMakerTrainingJobs,
    TaskIdentity,
    TrainingRequestError,
    allocator_training_jobs,
    build_request,
    capacity_of,
    checkpoint_s3_uri,
    normalized_request,
    quota_tags,
    request_problems,
    request_training_job_stop,
    training_job_name,
)
from tests.sagemaker.conftest import finish_training, training_request
from tests.sagemaker.moto_fixture import MotoServer
from tests.waiting import wait_for

IDENTITY = TaskIdentity("team_a_pipeline", "manual__2026-11-30T05:00:00+00:00", "train", -1, 1)


def identity(unique: str, try_number: int = 1, map_index: int = -1) -> TaskIdentity:
    return TaskIdentity("team_a_pipeline", f"run-{unique}", "train", map_index, try_number)


# --- names, requests, tags (no server) -------------------------------------------------------------------


def test_names_are_valid_deterministic_and_distinct_per_try_and_attempt() -> None:
    long = TaskIdentity("d" * 250, "r" * 250, "t.group." + "x" * 240, 12345, 99)
    for each in (IDENTITY, long):
        name = training_job_name(each, 99999)
        assert len(name) <= MAX_TRAINING_JOB_NAME_LENGTH
        assert TRAINING_JOB_NAME_PATTERN.match(name)
        assert training_job_name(each, 1) == training_job_name(each, 1)
    retry = TaskIdentity(IDENTITY.dag_id, IDENTITY.run_id, IDENTITY.task_id, IDENTITY.map_index, 2)
    names = {training_job_name(IDENTITY, 1), training_job_name(IDENTITY, 2), training_job_name(retry, 1)}
    assert len(names) == 3
    assert training_job_name(IDENTITY, 2).endswith("-t1-a2")
    assert IDENTITY.task_key == retry.task_key  # every try shares the checkpoint prefix
    other_map_index = TaskIdentity(IDENTITY.dag_id, IDENTITY.run_id, IDENTITY.task_id, 0, 1)
    assert other_map_index.task_key != IDENTITY.task_key
    with pytest.raises(ValueError, match="attempt must be >= 1"):
        training_job_name(IDENTITY, 0)


def test_names_carry_a_digest_of_the_task_instance_id_so_deployments_never_meet() -> None:
    ours, theirs = (dataclasses.replace(IDENTITY, ti_id=str(uuid.uuid4())) for _ in range(2))
    assert training_job_name(ours, 1) != training_job_name(theirs, 1)  # the same DAG, run and task ids
    assert training_job_name(ours, 1) == training_job_name(dataclasses.replace(ours), 1)  # found again
    assert training_job_name(ours, 1) == f"{ours.task_key}-{ours.deployment_component}-t1-a1"
    assert ours.task_key == theirs.task_key == IDENTITY.task_key  # checkpoint prefixes as before
    long = TaskIdentity("d" * 250, "r" * 250, "t.group." + "x" * 240, 12345, 9999, str(uuid.uuid4()))
    name = training_job_name(long, 99999)
    assert len(name) == MAX_TRAINING_JOB_NAME_LENGTH and TRAINING_JOB_NAME_PATTERN.match(name)
    assert (
        quota_tags(ours, job_queue="q", quota_share_name="s", attempt=1, lease_id="x")["airflow-quota:ti-id"]
        == ours.ti_id
    )


def test_every_attempt_gets_the_same_checkpoint_prefix_and_the_quota_tags() -> None:
    request = training_request(Tags=[{"Key": "team", "Value": "a"}])
    first = build_request(
        request,
        name=training_job_name(IDENTITY, 1),
        checkpoint_uri=checkpoint_s3_uri(request, IDENTITY),
        tags=quota_tags(IDENTITY, job_queue="gpu", quota_share_name="team-a", attempt=1, lease_id="j#1"),
    )
    second = build_request(
        request,
        name=training_job_name(IDENTITY, 2),
        checkpoint_uri=checkpoint_s3_uri(request, IDENTITY),
        tags=quota_tags(IDENTITY, job_queue="gpu", quota_share_name="team-a", attempt=2, lease_id="j#2"),
    )
    uri = f"s3://team-a-models/llm/checkpoints/{IDENTITY.task_key}/"
    assert first["CheckpointConfig"] == second["CheckpointConfig"] == {"S3Uri": uri}
    tags = {tag["Key"]: tag["Value"] for tag in second["Tags"]}
    assert tags["team"] == "a"
    assert tags["airflow-quota:job-queue"] == "gpu"
    assert tags["airflow-quota:quota-share"] == "team-a"
    assert tags["airflow-quota:dag-id"] == "team_a_pipeline"
    assert tags["airflow-quota:run-id"] == IDENTITY.run_id
    assert tags["airflow-quota:task-id"] == "train"
    assert tags["airflow-quota:attempt"] == "2"
    assert request["Tags"] == [{"Key": "team", "Value": "a"}]  # the input is left as it was

    own_root = training_request(CheckpointConfig={"S3Uri": "s3://ckpt/llm", "LocalPath": "/opt/ml/ckpt"})
    built = build_request(own_root, name="n", checkpoint_uri=checkpoint_s3_uri(own_root, IDENTITY), tags={})
    expected = {"S3Uri": "s3://ckpt/llm", "LocalPath": "/opt/ml/ckpt"}  # the user's own, as given
    assert built["CheckpointConfig"] == expected
    per_try = checkpoint_s3_uri(own_root, IDENTITY, per_try=True)
    assert per_try == "s3://ckpt/llm/try-1/"


def test_tag_values_keep_only_characters_aws_accepts() -> None:
    odd = TaskIdentity("dag", "run#1 (retry)!", "task", -1, 1)
    tags = quota_tags(odd, job_queue="q", quota_share_name="s", attempt=1, lease_id="x")
    assert tags["airflow-quota:run-id"] == "run_1 _retry__"


def test_the_capacity_is_the_resource_config_and_bad_requests_list_every_problem() -> None:
    rendered = normalized_request(training_request(instance_count="4"))  # type: ignore[arg-type]  # Jinja
    assert capacity_of(rendered) == ("ml.p4d.24xlarge", 4)
    assert request_problems(rendered) == []

    bad = training_request(Hyperparameters={"lr": "1"})
    del bad["ResourceConfig"]
    del bad["RoleArn"]
    problems = request_problems(bad)
    assert any(problem.startswith("ResourceConfig: missing") for problem in problems)
    assert any('Unknown parameter in input: "Hyperparameters"' in problem for problem in problems)
    assert any('Missing required parameter in input: "RoleArn"' in problem for problem in problems)
    with pytest.raises(TrainingRequestError, match="ResourceConfig: missing"):
        capacity_of(bad)
    zero = training_request(instance_count=0)
    assert "ResourceConfig.InstanceCount: must be a whole number >= 1, got 0" in request_problems(zero)


@pytest.mark.parametrize(
    ("rendered", "problem"),
    [
        pytest.param(" 4 ", None, id="digits_are_a_count"),
        pytest.param("²", "got '²'", id="a_superscript_digit_is_not"),
        pytest.param("1_000", "got '1_000'", id="an_underscore_is_not"),
        pytest.param("9" * 5000, f"got '{'9' * 40}...' (5000 characters)", id="huge"),
    ],
)
def test_a_rendered_instance_count_is_plain_digits(rendered: str, problem: str | None) -> None:
    request = normalized_request(training_request(instance_count=rendered))  # type: ignore[arg-type]  # Jinja

    problems = request_problems(request)  # before: ValueError from int() for the last two

    expected = (
        [] if problem is None else [f"ResourceConfig.InstanceCount: must be a whole number >= 1, {problem}"]
    )
    assert [p for p in problems if p.startswith("ResourceConfig.InstanceCount")] == expected


# --- against the server ------------------------------------------------------------------------------------


def launch_request(unique: str, attempt: int = 1, **kwargs: object) -> dict[str, object]:
    request = training_request(**kwargs)  # type: ignore[arg-type]
    who = identity(unique)
    return build_request(
        request,
        name=training_job_name(who, attempt),
        checkpoint_uri=checkpoint_s3_uri(request, who),
        tags=quota_tags(who, job_queue="gpu", quota_share_name="team-a", attempt=attempt, lease_id="l"),
    )


def test_launch_is_idempotent_on_the_name(moto_server: MotoServer, unique: str) -> None:
    jobs = SageMakerTrainingJobs("aws_default")
    request = launch_request(unique, duration_s=30)

    first, created = jobs.launch(request)
    again, created_again = jobs.launch(request)

    assert (created, created_again) == (True, False)
    assert first["TrainingJobArn"] == again["TrainingJobArn"]
    assert again["TrainingJobStatus"] == "InProgress"
    assert again["CheckpointConfig"]["S3Uri"] == request["CheckpointConfig"]["S3Uri"]  # type: ignore[index]
    summaries = moto_server.client().list_training_jobs()["TrainingJobSummaries"]
    names = [job["TrainingJobName"] for job in summaries]
    assert names.count(request["TrainingJobName"]) == 1
    jobs.stop_and_wait(str(request["TrainingJobName"]), poll_interval=0.1)


def test_describe_follows_the_job_to_its_end(moto_server: MotoServer, unique: str) -> None:
    jobs = SageMakerTrainingJobs("aws_default")
    request = launch_request(unique, duration_s=60)
    jobs.launch(request)
    name = str(request["TrainingJobName"])
    assert jobs.describe(name)["TrainingJobStatus"] == "InProgress"  # type: ignore[index]
    finish_training(moto_server.client(), name)  # its training ends (after 60 s, or now)
    wait_for("the job to complete", lambda: jobs.describe(name)["TrainingJobStatus"] == "Completed")  # type: ignore[index]
    assert jobs.describe(f"missing-{unique}") is None


def test_stop_and_wait_returns_once_the_job_is_stopped(moto_server: MotoServer, unique: str) -> None:
    jobs = SageMakerTrainingJobs("aws_default")
    request = launch_request(unique, duration_s=60)
    jobs.launch(request)
    name = str(request["TrainingJobName"])

    stopped = jobs.stop_and_wait(name, poll_interval=0.05)
    assert stopped is not None
    assert (stopped["TrainingJobStatus"], stopped["SecondaryStatus"]) == ("Stopped", "Stopped")
    # Again on a stopped job, on a completed job, on no job: nothing to do, no error.
    assert jobs.stop_and_wait(name, poll_interval=0.05)["TrainingJobStatus"] == "Stopped"  # type: ignore[index]
    done = launch_request(unique, attempt=2, duration_s=0.1)
    jobs.launch(done)
    time.sleep(0.2)
    assert jobs.stop_and_wait(str(done["TrainingJobName"]))["TrainingJobStatus"] == "Completed"  # type: ignore[index]
    assert jobs.stop_and_wait(f"missing-{unique}") is None


def test_stop_and_wait_gives_up_after_its_timeout(moto_server: MotoServer, unique: str) -> None:
    jobs = SageMakerTrainingJobs("aws_default")
    request = launch_request(unique, duration_s=60)
    request["HyperParameters"]["emulator.stop_delay_s"] = "30"  # type: ignore[index]
    jobs.launch(request)
    with pytest.raises(TimeoutError, match="is still Stopping"):
        jobs.stop_and_wait(str(request["TrainingJobName"]), poll_interval=0.05, timeout=0.3)


def test_the_allocator_asks_a_job_to_stop_without_waiting(moto_server: MotoServer, unique: str) -> None:
    jobs = SageMakerTrainingJobs("aws_default")
    request = launch_request(unique, duration_s=60, stop_delay_s=60)
    jobs.launch(request)
    name = str(request["TrainingJobName"])

    # "Stopping", not "Stopped": it asked and returned without waiting for the stop (ask again later). (A
    # bound on its wall time failed once on a loaded machine and said nothing more.)
    assert request_training_job_stop("aws_default", None, name) == "Stopping"
    finish_training(moto_server.client(), name)  # the stop ends (after 60 s, or now)
    wait_for("the job to stop", lambda: request_training_job_stop("aws_default", None, name) == "Stopped")
    assert request_training_job_stop("aws_default", None, f"missing-{unique}") is None


def test_the_allocator_reuses_one_client_per_connection_and_region_and_rebuilds_it_after_a_while(
    moto_server: MotoServer, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = launch_request(unique, duration_s=60)
    SageMakerTrainingJobs("aws_default").launch(request)
    name = str(request["TrainingJobName"])
    sagemaker.forget_allocator_clients()

    assert request_training_job_stop("aws_default", None, name) == "Stopping"
    client = allocator_training_jobs("aws_default", None).hook.conn
    assert request_training_job_stop("aws_default", None, f"missing-{unique}") is None
    assert allocator_training_jobs("aws_default", None).hook.conn is client  # built once, reused
    assert allocator_training_jobs("aws_default", "eu-west-1") is not allocator_training_jobs(
        "aws_default", None
    )

    monkeypatch.setattr(sagemaker, "ALLOCATOR_CLIENT_MAX_AGE_SECONDS", 0.0)  # its age is up: read again
    assert allocator_training_jobs("aws_default", None).hook.conn is not client


def test_the_allocator_rebuilds_its_client_when_sagemaker_says_its_credentials_expired(
    moto_server: MotoServer, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sagemaker.forget_allocator_clients()
    stale = allocator_training_jobs("aws_default", None)

    def expired(name: str) -> None:
        """What SageMaker answers a client whose temporary credentials ran out (not causable on moto)."""
        error = {
            "Code": "ExpiredTokenException",
            "Message": "The security token included in the request is expired",
        }
        raise ClientError({"Error": error}, "StopTrainingJob")

    monkeypatch.setattr(stale, "request_stop", expired)

    assert request_training_job_stop("aws_default", None, f"missing-{unique}") is None  # asked once more
    assert allocator_training_jobs("aws_default", None) is not stale
