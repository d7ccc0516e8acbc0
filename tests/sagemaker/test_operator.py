"""QuotaTrainingOperator's steps, driven as the task runner drives them, against the server.

Each step runs the operator's real code against moto's server with our emulator; only the task instance
and its ``task_state_store`` are stand-ins (``task_runtime``). The end-to-end test on a real scheduler and
triggerer (the allocator's) covers those.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_quota.operators.links import SageMakerTrainingJobLink, quota_share_url
from airflow_quota.operators.training import QuotaTrainingOperator
from airflow_quota.protocol import PREEMPT_KEY, TRAINING_JOB_KEY
from airflow_quota.triggers.admission import ADMISSION_CLASSPATH, QuotaAdmissionTrigger, request_document
from airflow_quota.triggers.sagemaker import SageMakerTrainingJobTrigger
from tests.sagemaker.conftest import finish_training, training_request
from tests.sagemaker.moto_fixture import MotoServer
from tests.sagemaker.moto_process import REGION
from tests.sagemaker.task_runtime import TaskInstanceStandIn, TaskRun, monitor_event
from tests.waiting import wait_for


def operator(**kwargs: Any) -> QuotaTrainingOperator:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "job_queue": "gpu-training",
        "quota_share_name": "team-a",
        "training_job_config": training_request(duration_s=0.5),
        "scheduling_priority": 50,
        "poll_interval": 0.1,
        "stop_poll_interval": 0.05,
        "settle_seconds": 0,
        "follow_seconds": 0,
        **kwargs,
    }
    return QuotaTrainingOperator(**arguments)


def task_run(unique: str, **kwargs: Any) -> TaskRun:
    return TaskRun(operator(**kwargs), TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}"))


def status_of(moto_server: MotoServer, name: str) -> str:
    return str(moto_server.client().describe_training_job(TrainingJobName=name)["TrainingJobStatus"])


def job_names(moto_server: MotoServer, contains: str) -> list[str]:
    summaries = moto_server.client().list_training_jobs(NameContains=contains)["TrainingJobSummaries"]
    return sorted(summary["TrainingJobName"] for summary in summaries)


# --- validation ---------------------------------------------------------------------------------------------


BAD_ARGUMENTS = [
    pytest.param(
        {"scheduling_priority": 10000},
        "schedulingPriority: schedulingPriority is 10000: it must be a whole number from 0 to 9999",
        id="priority_above_9999",
    ),
    pytest.param(
        {"scheduling_priority": "5"},
        "schedulingPriority: schedulingPriority is '5': it must be a whole number",
        id="priority_a_string",
    ),
    pytest.param(
        {"preemption_retries_before_termination": -1},
        "preemptionRetriesBeforeTermination: preemptionRetriesBeforeTermination is -1",
        id="negative_preemption_retries",
    ),
    pytest.param(
        {"quota_share_name": "a/b"},
        "quotaShareName: quotaShareName is 'a/b': it must be a name of 1 to 128 letters",
        id="share_name_with_a_slash",
    ),
    pytest.param(
        {"job_queue": "gpu\x00training"},
        "jobQueue: jobQueue is 'gpu\\x00training': it must be the name of a job queue",
        id="job_queue_name_with_a_nul_byte",
    ),
    pytest.param(
        {"poll_interval": -1}, "poll_interval: must be a number of seconds >= 0", id="poll_interval"
    ),
    pytest.param({"settle_seconds": -1}, "settle_seconds: must be a number of seconds >= 0", id="settle"),
    pytest.param({"follow_seconds": "5"}, "follow_seconds: must be a number of seconds >= 0", id="follow"),
    pytest.param({"backend": "ec2"}, "backend: must be 'sagemaker' or 'local', got 'ec2'", id="backend"),
]


@pytest.mark.parametrize(("arguments", "says"), BAD_ARGUMENTS)
def test_a_bad_argument_fails_its_task_when_it_runs_not_the_dag_file(
    arguments: dict[str, Any], says: str, unique: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with DAG("team_a_pipeline", schedule=None):
        bad = operator(**arguments)  # no exception: the DAG file still imports
    assert not bad.start_from_trigger  # it starts in a worker, which fails it
    parse_log = "".join(capfd.readouterr())
    assert "Task train will fail when it runs: " in parse_log  # the dag-processor's log warns
    assert says in parse_log
    run = TaskRun(bad, TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}"))

    with pytest.raises(AirflowFailException) as failure:
        run.operator.execute(run.context)

    assert str(failure.value).startswith("task train: 1 error\n")
    assert says in str(failure.value)


BAD_CAPACITY = [
    pytest.param(
        {"instance_count": 0},
        "ResourceConfig.InstanceCount: must be a whole number >= 1, got 0",
        id="no_instances",
    ),
    pytest.param(
        {"instance_count": 100_001},
        "instanceCount: instanceCount is 100001: it must be a whole number from 1 to 100000",
        id="instances_past_the_bound",
    ),
    pytest.param(
        {"instance_type": "ml.p4d 24xlarge"},
        "capacityUnit: capacityUnit is 'ml.p4d 24xlarge'",
        id="unit_with_a_space",
    ),
    pytest.param({"instance_type": "ml." + "x" * 300}, "capacityUnit: capacityUnit is", id="unit_too_long"),
]


@pytest.mark.parametrize(("request_arguments", "says"), BAD_CAPACITY)
def test_a_request_whose_capacity_is_out_of_bounds_is_warned_about_when_the_dag_file_is_parsed(
    request_arguments: dict[str, Any], says: str, unique: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with DAG("team_a_pipeline", schedule=None):
        bad = operator(training_job_config=training_request(**request_arguments))
    assert not bad.start_from_trigger  # it starts in a worker, which fails it
    parse_log = "".join(capfd.readouterr())
    assert "Task train will fail when it runs: " in parse_log  # the dag-processor's log warns
    assert says in parse_log
    run = TaskRun(bad, TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}"))

    with pytest.raises(AirflowFailException) as failure:
        run.operator.execute(run.context)

    assert str(failure.value).startswith("task train: 1 error\n")
    assert says in str(failure.value)


def test_a_dag_file_with_a_bad_task_keeps_its_other_tasks(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / "two_tasks.py"
    path.write_text(
        "from airflow.sdk import DAG\n"
        "from airflow_quota.operators.training import QuotaTrainingOperator\n"
        "from tests.sagemaker.conftest import training_request\n"
        "with DAG('two_tasks', schedule=None):\n"
        "    for task_id, priority in (('good', 10), ('bad', 10000)):\n"
        "        QuotaTrainingOperator(\n"
        "            task_id=task_id, job_queue='gpu-training', quota_share_name='team-a',\n"
        "            training_job_config=training_request(), scheduling_priority=priority,\n"
        "        )\n"
    )

    bag = DagBag(dag_folder=str(path))

    assert bag.import_errors == {}
    dag = bag.dags["two_tasks"]
    assert sorted(dag.task_ids) == ["bad", "good"]
    assert dag.get_task("good").start_from_trigger  # it waits for quota as usual
    assert not dag.get_task("bad").start_from_trigger


def test_a_bad_request_fails_before_waiting_with_every_problem(unique: str) -> None:
    request = training_request(Hyperparameters={"lr": "1"})
    del request["ResourceConfig"]
    run = task_run(unique, training_job_config=request, scheduling_priority=10000)

    with pytest.raises(AirflowFailException) as failure:
        run.operator.execute(run.context)

    message = str(failure.value)
    assert message.startswith("task train: 3 errors\n")
    assert "ResourceConfig: missing" in message
    assert 'Unknown parameter in input: "Hyperparameters"' in message
    assert "schedulingPriority is 10000" in message


@pytest.mark.parametrize(
    ("count", "says"),
    [
        pytest.param(0, "InstanceCount: must be a whole number >= 1", id="zero"),
        pytest.param(
            3_000_000_000,
            "instanceCount: instanceCount is 3000000000: it must be a whole number from 1 to 100000",
            id="over_the_ledger_int4",
        ),
    ],
)
def test_a_request_the_quota_cannot_hold_fails_before_waiting(unique: str, count: int, says: str) -> None:
    run = task_run(unique, training_job_config=training_request(instance_count=count))
    with pytest.raises(AirflowFailException) as failure:
        run.operator.execute(run.context)
    assert says in str(failure.value)


def test_execute_waits_for_quota_with_the_request(unique: str) -> None:
    run = task_run(unique, preemption_retries_before_termination=2)

    deferred = run.execute()

    trigger = deferred.trigger
    assert isinstance(trigger, QuotaAdmissionTrigger)
    assert (deferred.method_name, deferred.timeout) == ("on_grant", None)
    assert trigger.job_queue == "gpu-training"
    assert trigger.quota_share_name == "team-a"
    assert (trigger.capacity_unit, trigger.instance_count) == ("ml.p4d.24xlarge", 2)
    assert (trigger.scheduling_priority, trigger.preemption_retries_before_termination) == (50, 2)
    assert (trigger.attempt, trigger.released_lease_id) == (0, None)
    assert trigger.submitted_at is not None and datetime.fromisoformat(trigger.submitted_at).tzinfo
    assert deferred.kwargs == {"submitted_at": trigger.submitted_at, "admission": 0, "preemptions": 0}


def test_a_request_known_at_parse_time_waits_from_the_triggerer_and_one_with_templates_from_a_worker(
    moto_server: MotoServer, unique: str
) -> None:
    with DAG("team_a_pipeline", schedule=None):
        static = operator(task_id="static", training_job_config=training_request(duration_s=60))
        templated = operator(task_id="templated", quota_share_name="{{ params.share }}")
        factory = operator(task_id="factory", training_job_config=lambda: training_request())
        invalid = operator(task_id="invalid", training_job_config={"ResourceConfig": {}})
    outside_a_dag = operator(task_id="loose")

    assert static.start_from_trigger
    assert not any(op.start_from_trigger for op in (templated, factory, invalid, outside_a_dag))
    args = static.start_trigger_args
    assert args is not None
    assert (args.trigger_cls, args.next_method, args.timeout) == (ADMISSION_CLASSPATH, "on_grant", None)
    assert request_document(args.trigger_kwargs or {}) == {
        "jobName": "team_a_pipeline-static",
        "quotaShareName": "team-a",
        "capacityUnit": "ml.p4d.24xlarge",
        "instanceCount": 2,
        "schedulingPriority": 50,
    }

    # Its first worker run is the grant's; a requeue keeps the first submission the grant told it.
    run = TaskRun(static, TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}"))
    grant = run.grant(attempt=1)
    monitoring = run.resume_deferred(run.start_from_trigger(), grant)
    run.store.set(PREEMPT_KEY, preempt(run, grant["lease_id"]))
    requeued = run.resume_deferred(monitoring, preempt(run, grant["lease_id"]))
    assert isinstance(requeued.trigger, QuotaAdmissionTrigger)
    assert requeued.trigger.submitted_at == grant["submitted_at"]
    assert requeued.trigger.job_name.endswith("-t1")  # from here on, named after its task instance


def test_a_task_with_an_execution_timeout_waits_from_a_worker_so_its_queue_wait_is_not_counted() -> None:
    with DAG("team_a_pipeline", schedule=None):
        # From the triggerer, Airflow would count the wait for quota against the execution timeout.
        timed = operator(task_id="timed", execution_timeout=timedelta(hours=6))

    assert not timed.start_from_trigger
    assert timed.start_trigger_args is None


# --- grant, monitor, finish ---------------------------------------------------------------------------------


def test_a_granted_job_trains_and_returns_its_result(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique)
    waiting = run.execute()

    monitoring = run.resume_deferred(waiting, run.grant(attempt=1))

    assert isinstance(monitoring.trigger, SageMakerTrainingJobTrigger)
    assert monitoring.method_name == "on_monitor"
    name = monitoring.trigger.training_job_name
    assert name.endswith("-t1-a1")
    assert run.record()["state"] == "launched"
    assert run.record()["name"] == name
    assert run.record()["aws_conn_id"] == "aws_default"
    arn = run.record()["arn"]  # once CreateTrainingJob answered: the API's serviceResourceId
    assert arn.endswith(f":training-job/{name}")
    # Its checkpoint prefix, as SageMaker describes the job: the allocator lists it (issue 37).
    described = moto_server.client().describe_training_job(TrainingJobName=name)["CheckpointConfig"]["S3Uri"]
    assert run.record()["checkpoint_uri"] == described
    assert described.startswith("s3://team-a-models/llm/checkpoints/")
    assert run.ti.xcom["quota_training_job"]["training_job_name"] == name
    assert SageMakerTrainingJobLink().format_link(**run.ti.xcom["quota_training_job"]) == (
        f"https://console.aws.amazon.com/sagemaker/home?region={REGION}#/jobs/{name}"
    )

    result = run.resume(monitoring, monitor_event(monitoring))

    assert result["training_job_name"] == name
    assert result["training_job_arn"].endswith(f"training-job/{name}")
    assert result["model_artifacts"].endswith(f"/{name}/output/model.tar.gz")
    assert (result["attempts"], result["preemptions"]) == (1, 0)
    assert (run.record()["state"], run.record()["arn"]) == ("ended", arn)


def test_a_rejection_fails_the_task_with_its_reason(unique: str) -> None:
    run = task_run(unique)
    waiting = run.execute()
    reason = "preemptionRetriesBeforeTermination (2) exhausted"
    rejection = {"rejected": True, "job_id": "j", "reason": reason}

    with pytest.raises(AirflowFailException, match=r"rejected this job: preemptionRetriesBeforeTermination"):
        run.resume(waiting, rejection)


def test_a_lease_of_another_task_instance_is_ignored(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique)
    waiting = run.execute()

    again = run.resume_deferred(waiting, run.grant(ti_id=str(uuid.uuid4())))

    assert isinstance(again.trigger, QuotaAdmissionTrigger)
    assert again.trigger.submitted_at == waiting.kwargs["submitted_at"]  # type: ignore[index]
    assert again.trigger.attempt == 0
    assert run.store.get(TRAINING_JOB_KEY) is None
    assert job_names(moto_server, _identity(run)) == []


def test_failed_and_stopped_jobs_fail_the_task_for_its_retry_policy(
    moto_server: MotoServer, unique: str
) -> None:
    request = training_request(duration_s=0.2, outcome="Failed", failure_reason="AlgorithmError: OOM")
    failing = task_run(f"{unique}-f", training_job_config=request)
    monitoring = failing.resume_deferred(failing.execute(), failing.grant())
    with pytest.raises(AirflowException, match="failed: AlgorithmError: OOM") as failure:
        failing.resume(monitoring, monitor_event(monitoring))
    assert not isinstance(failure.value, AirflowFailException)  # retries apply
    assert failing.record()["state"] == "ended"

    too_long = task_run(f"{unique}-t", training_job_config=training_request(duration_s=60, max_runtime_s=1))
    monitoring = too_long.resume_deferred(too_long.execute(), too_long.grant())
    with pytest.raises(AirflowException, match="ran past its runtime limit"):
        too_long.resume(monitoring, monitor_event(monitoring))

    stopped = task_run(f"{unique}-s", training_job_config=training_request(duration_s=60))
    monitoring = stopped.resume_deferred(stopped.execute(), stopped.grant())
    moto_server.client().stop_training_job(TrainingJobName=monitoring.trigger.training_job_name)  # type: ignore[attr-defined]
    with pytest.raises(AirflowException, match="was stopped outside the quota allocator"):
        stopped.resume(monitoring, monitor_event(monitoring))


# --- preemption ---------------------------------------------------------------------------------------------


def preempt(run: TaskRun, lease_id: str) -> dict[str, Any]:
    return {
        "preempt": True,
        "lease_id": lease_id,
        "job_id": run.grant()["job_id"],
        "preempted_by": "team_a_pipeline/urgent/train/-1/1",
        "rule": "IN_SHARE_PRIORITY",
        "reason": "Preempted by a higher-priority job",
        "at": "2026-11-30T05:01:00+00:00",
    }


def test_a_preempted_job_stops_requeues_in_place_and_resumes(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique, training_job_config=training_request(duration_s=60))
    waiting = run.execute()
    first_grant = run.grant(attempt=1)
    monitoring = run.resume_deferred(waiting, first_grant)
    first_job = monitoring.trigger.training_job_name  # type: ignore[attr-defined]
    run.store.set(PREEMPT_KEY, preempt(run, first_grant["lease_id"]))  # the allocator writes both channels

    requeued = run.resume_deferred(monitoring, preempt(run, first_grant["lease_id"]))

    assert status_of(moto_server, first_job) == "Stopped"  # really stopped before the stop report
    assert isinstance(requeued.trigger, QuotaAdmissionTrigger)
    assert requeued.method_name == "on_grant"
    assert requeued.trigger.attempt == 1
    assert requeued.trigger.released_lease_id == first_grant["lease_id"]
    assert requeued.trigger.submitted_at == waiting.kwargs["submitted_at"]  # type: ignore[index]
    assert run.store.get(PREEMPT_KEY) is None
    assert run.record()["arn"].endswith(f":training-job/{first_job}")  # the stopped attempt's
    assert run.record() | {"aws_conn_id": None, "region_name": None, "arn": None} == {
        "backend": "sagemaker",
        "name": first_job,
        "attempt": 1,
        "lease_id": first_grant["lease_id"],
        "state": "ended",
        "aws_conn_id": None,
        "region_name": None,
        "arn": None,
    }

    # The next grant launches attempt 2 on the same checkpoint prefix; it completes.
    run.operator.training_job_config = training_request(duration_s=0.3)
    monitoring = run.resume_deferred(requeued, run.grant(attempt=2))
    second_job = monitoring.trigger.training_job_name  # type: ignore[attr-defined]
    assert second_job == first_job.removesuffix("-a1") + "-a2"
    describe = moto_server.client().describe_training_job
    checkpoints = [
        describe(TrainingJobName=name)["CheckpointConfig"]["S3Uri"] for name in (first_job, second_job)
    ]
    assert checkpoints[0] == checkpoints[1]
    tags = moto_server.client().list_tags(ResourceArn=describe(TrainingJobName=second_job)["TrainingJobArn"])
    assert {"Key": "airflow-quota:attempt", "Value": "2"} in tags["Tags"]

    result = run.resume(monitoring, monitor_event(monitoring))
    assert (result["training_job_name"], result["attempts"], result["preemptions"]) == (second_job, 2, 1)


def test_a_job_that_ends_within_the_follow_time_ends_the_task_in_its_launching_run(
    moto_server: MotoServer, unique: str
) -> None:
    run = task_run(unique, follow_seconds=30)  # the job runs 0.5 s

    result = run.resume(run.execute(), run.grant(attempt=1))  # no deferral on a monitoring trigger

    assert result["training_job_name"].endswith("-t1-a1")
    assert status_of(moto_server, result["training_job_name"]) == "Completed"
    assert run.record()["state"] == "ended"


def test_a_job_still_running_after_the_follow_time_is_handed_to_its_monitoring_trigger(
    moto_server: MotoServer, unique: str
) -> None:
    run = task_run(unique, follow_seconds=0.2, training_job_config=training_request(duration_s=60))

    monitoring = run.resume_deferred(run.execute(), run.grant(attempt=1))

    assert isinstance(monitoring.trigger, SageMakerTrainingJobTrigger)
    assert status_of(moto_server, monitoring.trigger.training_job_name) == "InProgress"


def test_a_preemption_while_the_launching_run_follows_its_job_stops_and_requeues_from_that_run(
    moto_server: MotoServer, unique: str
) -> None:
    run = task_run(unique, follow_seconds=30, training_job_config=training_request(duration_s=60))
    waiting = run.execute()
    grant = run.grant(attempt=1)

    def allocator_signals_once_launched() -> None:
        """The allocator writes its signal while the worker run that launched the job follows it."""
        wait_for("the launch", lambda: (run.store.get(TRAINING_JOB_KEY) or {}).get("state") == "launched")
        run.store.set(PREEMPT_KEY, preempt(run, grant["lease_id"]))

    signal = threading.Thread(target=allocator_signals_once_launched, daemon=True)
    signal.start()

    requeued = run.resume_deferred(waiting, grant)
    signal.join(30)

    assert isinstance(requeued.trigger, QuotaAdmissionTrigger)
    assert (requeued.trigger.attempt, requeued.trigger.released_lease_id) == (1, grant["lease_id"])
    assert status_of(moto_server, run.record()["name"]) == "Stopped"
    assert run.record()["state"] == "ended"


def test_a_preemption_signalled_before_launch_launches_nothing(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique)
    waiting = run.execute()
    grant = run.grant(attempt=1)
    run.store.set(PREEMPT_KEY, preempt(run, grant["lease_id"]))

    requeued = run.resume_deferred(waiting, grant)

    assert isinstance(requeued.trigger, QuotaAdmissionTrigger)
    assert (requeued.trigger.attempt, requeued.trigger.released_lease_id) == (1, grant["lease_id"])
    assert run.store.get(PREEMPT_KEY) is None
    assert run.store.get(TRAINING_JOB_KEY) is None
    assert job_names(moto_server, _identity(run)) == []


def test_a_preemption_of_another_lease_is_ignored(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique, training_job_config=training_request(duration_s=60))
    monitoring = run.resume_deferred(run.execute(), run.grant(attempt=2))
    run.store.set(PREEMPT_KEY, preempt(run, "an-old-lease#1"))

    again = run.resume_deferred(monitoring, preempt(run, "an-old-lease#1"))

    assert isinstance(again.trigger, SageMakerTrainingJobTrigger)
    assert again.trigger.training_job_name == monitoring.trigger.training_job_name  # type: ignore[attr-defined]
    assert status_of(moto_server, again.trigger.training_job_name) == "InProgress"
    run.operator.on_kill()


# --- crashes, retries, kills --------------------------------------------------------------------------------


def test_a_retry_reattaches_to_the_training_job_still_running(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique, training_job_config=training_request(duration_s=60))
    monitoring = run.resume_deferred(run.execute(), run.grant(attempt=1))
    launched = monitoring.trigger.training_job_name  # type: ignore[attr-defined]

    # The worker dies; the task's next try is granted (the allocator marks it a re-attach).
    retry = run.retry()
    monitoring = retry.resume_deferred(retry.execute(), retry.grant(attempt=1) | {"reattach": True})

    assert monitoring.trigger.training_job_name == launched  # type: ignore[attr-defined]
    assert job_names(moto_server, _identity(run)) == [launched]
    assert retry.record()["lease_id"] == retry.grant(attempt=1)["lease_id"]
    described = moto_server.client().describe_training_job(TrainingJobName=launched)["CheckpointConfig"]
    assert retry.record()["checkpoint_uri"] == described["S3Uri"]  # recorded again: the allocator lists it
    assert status_of(moto_server, launched) == "InProgress"  # reattached while it still trained
    finish_training(moto_server.client(), launched)
    result = retry.resume(monitoring, monitor_event(monitoring))
    assert result["training_job_name"] == launched


def test_a_retry_after_a_failed_job_launches_a_new_one(moto_server: MotoServer, unique: str) -> None:
    # Seen InProgress by its launch (a fixed 0.1 s was not, once, on a loaded machine), then it fails.
    run = task_run(unique, training_job_config=training_request(duration_s=60, outcome="Failed"))
    monitoring = run.resume_deferred(run.execute(), run.grant(attempt=1))
    first = monitoring.trigger.training_job_name  # type: ignore[attr-defined]
    finish_training(moto_server.client(), first)
    # The worker died before it saw the job fail: the record still says launched.
    wait_for("the first job to fail", lambda: status_of(moto_server, first) == "Failed")

    retry = run.retry()
    retry.operator.training_job_config = training_request(duration_s=0.2)
    monitoring = retry.resume_deferred(retry.execute(), retry.grant(attempt=1))

    second = monitoring.trigger.training_job_name  # type: ignore[attr-defined]
    assert second != first and second.endswith("-t2-a1")
    assert retry.resume(monitoring, monitor_event(monitoring))["training_job_name"] == second


def test_launching_twice_for_one_grant_reattaches(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique, training_job_config=training_request(duration_s=60))
    waiting = run.execute()
    grant = run.grant(attempt=1)
    first = run.resume_deferred(waiting, grant)
    run.store.delete(TRAINING_JOB_KEY)  # as if the record write was lost

    second = run.resume_deferred(waiting, grant)  # CreateTrainingJob answers ResourceInUse

    assert second.trigger.training_job_name == first.trigger.training_job_name  # type: ignore[attr-defined]
    run.operator.on_kill()


def test_on_kill_stops_the_training_job(moto_server: MotoServer, unique: str) -> None:
    run = task_run(unique, training_job_config=training_request(duration_s=60))
    monitoring = run.resume_deferred(run.execute(), run.grant(attempt=1))
    name = monitoring.trigger.training_job_name  # type: ignore[attr-defined]

    run.operator.on_kill()

    assert status_of(moto_server, name) in ("Stopping", "Stopped")


# --- links --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pushed", "url"),
    [
        pytest.param(
            {
                "training_job_name": "team-a-abc-t1-a2",
                "region_name": "eu-west-1",
                "aws_domain": "aws.amazon.com",
            },
            "https://console.aws.amazon.com/sagemaker/home?region=eu-west-1#/jobs/team-a-abc-t1-a2",
            id="aws",
        ),
        pytest.param(
            {"training_job_name": "j-t1-a1", "region_name": "cn-north-1", "aws_domain": "amazonaws.cn"},
            "https://console.amazonaws.cn/sagemaker/home?region=cn-north-1#/jobs/j-t1-a1",
            id="china",
        ),
        pytest.param(
            {"training_job_name": "j-t1-a1", "region_name": "us-gov-west-1", "partition": "aws-us-gov"},
            "https://console.amazonaws-us-gov.com/sagemaker/home?region=us-gov-west-1#/jobs/j-t1-a1",
            id="pushed_by_0_3_0_with_its_partition",
        ),
        pytest.param({}, "", id="no_job_launched_yet"),
    ],
)
def test_the_console_link_points_at_the_job_in_its_partitions_console(
    pushed: dict[str, str], url: str
) -> None:
    assert SageMakerTrainingJobLink().format_link(**pushed) == url
    assert SageMakerTrainingJobLink().name == "SageMaker training job"


def test_the_share_link_points_at_the_share_page() -> None:
    assert (
        quota_share_url("gpu training", "team-a", base_url="https://airflow.example.com/")
        == "https://airflow.example.com/quota/shares/gpu%20training/team-a"
    )


def _identity(run: TaskRun) -> str:
    """The name part every training job of this task instance shares."""
    from airflow_quota.backends.sagemaker import TaskIdentity

    ti = run.ti
    return TaskIdentity(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number).task_key
