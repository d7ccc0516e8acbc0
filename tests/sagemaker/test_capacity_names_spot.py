"""Routine AWS answers that must never lose a job, names that never meet another deployment's, checkpoint
prefixes as the user gives them, and what quota-managed jobs refuse (managed spot, warm pools).

Against moto's server with our emulator, whose ``emulator.create_error`` injects a capacity answer moto
cannot produce (``tests/sagemaker/moto_sagemaker.py``); the task instance and its ``task_state_store``
are stand-ins (``task_runtime``), as in ``test_operator.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_quota.backends.sagemaker import TAG_PREFIX
from airflow_quota.protocol import PREEMPT_KEY
from airflow_quota.triggers.admission import QuotaAdmissionTrigger, request_document
from airflow_quota.triggers.sagemaker import SageMakerTrainingJobTrigger
from tests.sagemaker.conftest import finish_training, training_request
from tests.sagemaker.moto_fixture import MotoServer
from tests.sagemaker.task_runtime import TaskInstanceStandIn, TaskRun, monitor_event
from tests.sagemaker.test_operator import job_names, operator, preempt, task_run

CAPACITY_FAILURE = "CapacityError: Unable to provision requested ML compute capacity. Please retry."


def capacity_request(code: str, attempts: int = 1, **extra: Any) -> dict[str, Any]:
    """A request whose first ``attempts`` CreateTrainingJob calls the emulator answers with ``code``."""
    request = training_request(duration_s=60, **extra)
    request["HyperParameters"]["emulator.create_error"] = f"{code}:{attempts}"
    return request


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


# --- item 5: capacity errors requeue --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "aws_batch_words"),
    [
        pytest.param("InsufficientCapacityError", True, id="insufficient_capacity"),
        pytest.param("ResourceLimitExceeded", False, id="resource_limit"),
        pytest.param("ThrottlingException", False, id="throttling"),
    ],
)
def test_a_capacity_answer_to_create_training_job_requeues_the_job_instead_of_failing_it(
    moto_server: MotoServer, unique: str, code: str, aws_batch_words: bool
) -> None:
    # botocore retries throttling itself first; one attempt keeps the test short.
    run = task_run(
        unique,
        training_job_config=capacity_request(code),
        botocore_config={"retries": {"max_attempts": 1, "mode": "standard"}},
        preemption_retries_before_termination=0,
    )
    waiting = run.execute()
    grant = run.grant(attempt=1)
    before = datetime.now(UTC)

    requeued = run.resume_deferred(waiting, grant)  # no exception: the task is not failed

    trigger = requeued.trigger
    assert isinstance(trigger, QuotaAdmissionTrigger)
    assert requeued.method_name == "on_grant"
    assert trigger.released_lease_id == grant["lease_id"]  # the capacity goes back
    assert trigger.submitted_at == waiting.kwargs["submitted_at"]  # type: ignore[index]  # its place
    assert trigger.attempt == 1
    assert requeued.kwargs["preemptions"] == 0  # type: ignore[index]  # no preemption used
    not_before = utc(str(trigger.not_before))
    assert before + timedelta(seconds=59) <= not_before <= datetime.now(UTC) + timedelta(seconds=61)
    reason = str(trigger.requeue_reason)
    assert f"CreateTrainingJob answered {code} at " in reason
    assert f"trying again after {not_before:%Y-%m-%dT%H:%M:%SZ}" in reason
    assert "requeued at its original position" in reason
    assert reason.startswith("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - ") is aws_batch_words
    assert run.record()["state"] == "ended"  # the allocator has no orphan to stop
    assert code in run.record()["ended_as"]
    assert job_names(moto_server, run.record()["name"]) == []  # nothing was created


def test_the_backoff_doubles_up_to_its_cap_and_the_job_launches_once_aws_has_capacity(
    moto_server: MotoServer, unique: str
) -> None:
    run = task_run(
        unique,
        training_job_config=capacity_request("InsufficientCapacityError", attempts=3),
        capacity_retry_delay=10,
        capacity_retry_max_delay=25,
    )
    deferred = run.execute()
    for attempt, backoff in ((1, 10), (2, 20), (3, 25)):
        asked = datetime.now(UTC)
        deferred = run.resume_deferred(deferred, run.grant(attempt=attempt))
        answered = datetime.now(UTC)
        assert isinstance(deferred.trigger, QuotaAdmissionTrigger)
        # The backoff counts from the capacity error's answer, which came between the two readings (the
        # emulator's first answer took 0.6 s under a loaded suite).
        not_before = utc(str(deferred.trigger.not_before))
        waits = ((not_before - answered).total_seconds(), (not_before - asked).total_seconds())
        assert waits[0] <= backoff <= waits[1], (attempt, waits)
        assert f"capacity error {attempt} of this try" in str(deferred.trigger.requeue_reason)

    monitoring = run.resume_deferred(deferred, run.grant(attempt=4))

    assert isinstance(monitoring.trigger, SageMakerTrainingJobTrigger)
    name = monitoring.trigger.training_job_name
    assert name.endswith("-t1-a4")
    finish_training(moto_server.client(), name)
    result = run.resume(monitoring, monitor_event(monitoring))
    assert (result["attempts"], result["preemptions"]) == (4, 0)


def test_a_training_job_failed_with_capacity_error_requeues_too(moto_server: MotoServer, unique: str) -> None:
    run = task_run(
        unique,
        training_job_config=training_request(
            duration_s=0.2, outcome="Failed", failure_reason=CAPACITY_FAILURE
        ),
    )
    waiting = run.execute()
    grant = run.grant(attempt=1)
    monitoring = run.resume_deferred(waiting, grant)

    requeued = run.resume_deferred(monitoring, monitor_event(monitoring))

    assert isinstance(requeued.trigger, QuotaAdmissionTrigger)
    assert requeued.trigger.released_lease_id == grant["lease_id"]
    reason = str(requeued.trigger.requeue_reason)
    assert reason.startswith("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Training job ")
    assert "failed with CapacityError" in reason and "Unable to provision" in reason
    assert run.record()["state"] == "ended"


def test_a_capacity_answer_while_preempted_reports_the_stop_too(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique, training_job_config=capacity_request("InsufficientCapacityError"))
    waiting = run.execute()
    grant = run.grant(attempt=1)
    run.store.set(PREEMPT_KEY, preempt(run, grant["lease_id"]))

    requeued = run.resume_deferred(waiting, grant)

    assert isinstance(requeued.trigger, QuotaAdmissionTrigger)
    assert requeued.trigger.released_lease_id == grant["lease_id"]


def test_other_create_training_job_errors_fail_the_task_as_before(
    moto_server: MotoServer, unique: str
) -> None:
    run = task_run(unique, training_job_config=capacity_request("ValidationException"))
    waiting = run.execute()

    with pytest.raises(Exception, match="ValidationException"):
        run.resume(waiting, run.grant(attempt=1))


# --- item 8: names and checkpoints ----------------------------------------------------------------------


def test_two_deployments_with_the_same_ids_never_share_a_training_job(
    moto_server: MotoServer, unique: str
) -> None:
    # Two Airflow deployments in one account: the same DAG, run and task ids, each its own task instance.
    ours = task_run(unique, training_job_config=training_request(duration_s=60))
    theirs = TaskRun(ours.operator, TaskInstanceStandIn(dag_id=ours.ti.dag_id, run_id=ours.ti.run_id))
    first = ours.resume_deferred(ours.execute(), ours.grant(attempt=1))
    second = theirs.resume_deferred(theirs.execute(), theirs.grant(attempt=1))

    assert isinstance(first.trigger, SageMakerTrainingJobTrigger)
    assert isinstance(second.trigger, SageMakerTrainingJobTrigger)
    names = (first.trigger.training_job_name, second.trigger.training_job_name)
    assert names[0] != names[1]  # each launched its own job, neither attached to the other's
    for name in names:
        assert len(name) <= 63 and name.endswith("-t1-a1")
        finish_training(moto_server.client(), name)


def test_a_job_of_the_same_name_that_is_not_ours_is_never_attached_to(
    moto_server: MotoServer, unique: str
) -> None:
    run = task_run(unique, training_job_config=training_request(duration_s=60))
    waiting = run.execute()
    from airflow_quota.operators.backend import task_identity

    name = f"{task_identity(run.context).base_name}-a1"
    foreign = training_request(duration_s=60)
    moto_server.client().create_training_job(TrainingJobName=name, **foreign)

    from airflow_quota.backends.sagemaker import TrainingJobNameTaken

    with pytest.raises(TrainingJobNameTaken, match="not re-attached"):
        run.resume(waiting, run.grant(attempt=1))
    finish_training(moto_server.client(), name)


def test_a_job_found_after_a_crash_is_ours_and_reattached(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique, training_job_config=training_request(duration_s=60))
    waiting = run.execute()
    first = run.resume_deferred(waiting, run.grant(attempt=1))
    assert isinstance(first.trigger, SageMakerTrainingJobTrigger)
    name = first.trigger.training_job_name
    run.store.values.clear()  # as if the worker died before it kept its record

    again = run.resume_deferred(waiting, run.grant(attempt=1))

    assert isinstance(again.trigger, SageMakerTrainingJobTrigger)
    assert again.trigger.training_job_name == name
    tags = moto_server.client().list_tags(ResourceArn=run.record()["arn"])["Tags"]
    assert {"Key": f"{TAG_PREFIX}ti-id", "Value": str(run.ti.id)} in tags
    finish_training(moto_server.client(), name)


def _checkpoint_of(moto_server: MotoServer, run: TaskRun, attempt: int = 1) -> str:
    monitoring = run.resume_deferred(run.execute(), run.grant(attempt=attempt))
    assert isinstance(monitoring.trigger, SageMakerTrainingJobTrigger)
    name = monitoring.trigger.training_job_name
    described = moto_server.client().describe_training_job(TrainingJobName=name)
    finish_training(moto_server.client(), name)
    run.resume(monitoring, monitor_event(monitoring))
    return str(described["CheckpointConfig"]["S3Uri"])


def test_a_users_checkpoint_prefix_is_used_as_given(moto_server: MotoServer, unique: str) -> None:
    given = f"s3://team-a-models/seeded/{unique}"
    request = training_request(duration_s=60, CheckpointConfig={"S3Uri": given, "LocalPath": "/opt/ml/ck"})

    assert _checkpoint_of(moto_server, task_run(unique, training_job_config=request)) == given


def test_checkpoint_per_try_gives_each_try_a_fresh_prefix(moto_server: MotoServer, unique: str) -> None:
    from airflow_quota.operators.backend import task_identity

    run = task_run(unique, training_job_config=training_request(duration_s=60), checkpoint_per_try=True)
    key = task_identity(run.context).task_key
    first = _checkpoint_of(moto_server, run)
    retry = run.retry()
    second = _checkpoint_of(moto_server, retry)

    assert first == f"s3://team-a-models/llm/checkpoints/{key}/try-1/"
    assert second == f"s3://team-a-models/llm/checkpoints/{key}/try-2/"
    shared = task_run(f"{unique}-s", training_job_config=training_request(duration_s=60))
    assert _checkpoint_of(moto_server, shared).endswith(
        f"/checkpoints/{task_identity(shared.context).task_key}/"
    )


# --- item 7: managed spot and warm pools are refused ----------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        pytest.param(
            {"EnableManagedSpotTraining": True},
            "EnableManagedSpotTraining: managed spot training is not supported for quota-managed jobs",
            id="spot",
        ),
        pytest.param(
            {"StoppingCondition": {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}},
            "StoppingCondition.MaxWaitTimeInSeconds: only for managed spot training",
            id="max_wait",
        ),
        pytest.param(
            {"KeepAlivePeriodInSeconds": 1800},
            "ResourceConfig.KeepAlivePeriodInSeconds: warm pools are not supported for quota-managed jobs",
            id="warm_pool",
        ),
    ],
)
def test_managed_spot_and_warm_pools_are_refused_when_the_dag_file_is_parsed(
    extra: dict[str, Any], says: str, unique: str, capfd: pytest.CaptureFixture[str]
) -> None:
    request = training_request()
    if "KeepAlivePeriodInSeconds" in extra:
        request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = extra["KeepAlivePeriodInSeconds"]
    else:
        request.update(extra)
    with DAG("team_a_pipeline", schedule=None):
        refused = operator(training_job_config=request)
    assert not refused.start_from_trigger
    assert says in "".join(capfd.readouterr())  # the dag-processor's log says it
    run = TaskRun(refused, TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}"))

    with pytest.raises(AirflowFailException, match="1 error") as failure:
        run.operator.execute(run.context)
    assert says in str(failure.value)


def test_no_spot_and_no_warm_pool_are_accepted() -> None:
    request = training_request(EnableManagedSpotTraining=False)
    request["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 0
    with DAG("team_a_pipeline", schedule=None):
        accepted = operator(training_job_config=request)
    assert accepted.start_from_trigger
    assert request_document(accepted.start_trigger_args.trigger_kwargs or {})["instanceCount"] == 2  # type: ignore[union-attr]


def test_a_job_stopped_past_its_spot_wait_says_so_not_outside_stop(
    moto_server: MotoServer, unique: str
) -> None:
    run = task_run(unique, training_job_config=training_request(duration_s=60))
    monitoring = run.resume_deferred(run.execute(), run.grant(attempt=1))
    assert isinstance(monitoring.trigger, SageMakerTrainingJobTrigger)
    name = monitoring.trigger.training_job_name
    finish_training(moto_server.client(), name)
    event = {"training_job_name": name, "status": "Stopped", "secondary_status": "MaxWaitTimeExceeded"}

    with pytest.raises(AirflowException, match="waited for spot capacity past") as failure:
        run.resume(monitoring, event)
    assert "outside the quota allocator" not in str(failure.value)
