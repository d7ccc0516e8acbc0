"""AWS Batch quota shares and service jobs against the emulator, through a plain boto3 client.

Every answer these clients parse is checked against botocore's output shape (the ``answers`` fixture
fails the test otherwise), and the scheduling seen here is our engine's: borrowing idle capacity,
reclaiming it when the lender's job arrives (the borrower's training job stopped, the preemption in its
``preemptionSummary``, its next attempt a new training job), priorities, idempotent submission and
termination.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from airflow_quota.aws_batch.design import import_design
from airflow_quota.aws_batch.export import export_design
from airflow_quota.engine.config import parse_quota_config
from tests.aws_batch.conftest import (
    UNIT,
    AnswerLog,
    create_design,
    emulator_behaviour,
    quota_file,
    share,
    submit,
)
from tests.sagemaker.conftest import finish_training
from tests.waiting import wait_for


def status(batch: Any, job_id: str) -> str:
    return str(batch.describe_service_job(jobId=job_id)["status"])


def training_job_name(arn: str) -> str:
    return arn.rsplit("/", 1)[1]


def attempt_arn(batch: Any, job_id: str) -> str:
    """The training job ARN of the service job's latest attempt."""
    return str(batch.describe_service_job(jobId=job_id)["latestAttempt"]["serviceResourceId"]["value"])


@pytest.fixture
def lending_queue(batch: Any, unique: str) -> str:
    """A job queue of 4 instances: ``research`` (2, LEND) lends to ``nlp`` (2, LEND_AND_BORROW)."""
    name = f"gpu-{unique}"
    create_design(
        batch,
        quota_file(name, 4, share("research", "LEND", 2), share("nlp", "LEND_AND_BORROW", 2)),
    )
    return name


def test_borrower_is_reclaimed_when_the_lenders_job_arrives(
    batch: Any, sagemaker: Any, lending_queue: str, answers: AnswerLog
) -> None:
    # nlp's job needs all 4 instances: 2 of its own and 2 borrowed from research, which is idle.
    borrower = submit(batch, lending_queue, "nlp-trial", "nlp", 4, duration_s="60,0.2")
    wait_for("the borrower to run", lambda: status(batch, borrower) == "RUNNING")
    first_attempt = batch.describe_service_job(jobId=borrower)["latestAttempt"]["serviceResourceId"]["value"]
    assert (
        sagemaker.describe_training_job(TrainingJobName=training_job_name(first_attempt))["TrainingJobStatus"]
        == "InProgress"
    )

    # research's job comes back for its own 2: the borrower's training job is stopped.
    lender = submit(batch, lending_queue, "research-train", "research", 2, duration_s="60")
    described = wait_for(
        "the borrower's preemption to be reported",
        lambda: (d := batch.describe_service_job(jobId=borrower)).get("preemptionSummary") and d,
    )
    assert described["status"] == "RUNNABLE"
    summary = described["preemptionSummary"]
    assert summary["preemptedAttemptCount"] == 1
    preempted = summary["recentPreemptedAttempts"][0]
    assert preempted["serviceResourceId"] == {"name": "TrainingJobArn", "value": first_attempt}
    assert "RECLAIM" in preempted["statusReason"] and lender in preempted["statusReason"]
    assert preempted["stoppedAt"] >= preempted["startedAt"]
    assert (
        sagemaker.describe_training_job(TrainingJobName=training_job_name(first_attempt))["TrainingJobStatus"]
        == "Stopped"
    )
    wait_for("the lender to run", lambda: status(batch, lender) == "RUNNING")

    # While it waits, the snapshot lists the borrower first in its share and research's usage.
    snapshot = batch.get_job_queue_snapshot(jobQueue=lending_queue)
    assert snapshot["frontOfQuotaShares"]["quotaShares"]["nlp"][0]["jobArn"].endswith(borrower)
    usage = snapshot["queueUtilization"]["quotaShareUtilization"]["topCapacityUtilization"]
    assert usage == [
        {"quotaShareName": "research", "capacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 2.0}]}
    ]

    # Once research's job is done, the borrower runs again, on a new training job, and succeeds.
    finish_training(sagemaker, training_job_name(attempt_arn(batch, lender)))
    wait_for("the lender to succeed", lambda: status(batch, lender) == "SUCCEEDED")
    wait_for("the borrower to succeed", lambda: status(batch, borrower) == "SUCCEEDED")
    final = batch.describe_service_job(jobId=borrower)
    arns = [attempt["serviceResourceId"]["value"] for attempt in final["attempts"]]
    assert arns[0] == first_attempt and len(arns) == 2 and arns[1] != first_attempt
    assert final["latestAttempt"]["serviceResourceId"]["value"] == arns[1]
    assert final["stoppedAt"] >= final["startedAt"] >= final["createdAt"]
    assert answers.checked["DescribeServiceJob"] > 5 and answers.checked["GetJobQueueSnapshot"] == 1


def test_a_job_out_of_preemption_retries_fails(batch: Any, lending_queue: str) -> None:
    borrower = submit(
        batch,
        lending_queue,
        "nlp-once",
        "nlp",
        4,
        preemptionConfiguration={"preemptionRetriesBeforeTermination": 0},
    )
    wait_for("the borrower to start", lambda: status(batch, borrower) in ("STARTING", "RUNNING"))
    submit(batch, lending_queue, "research-train", "research", 2)
    failed = wait_for(
        "the borrower to fail",
        lambda: (d := batch.describe_service_job(jobId=borrower))["status"] == "FAILED" and d,
    )
    assert "preemptionRetriesBeforeTermination=0" in failed["statusReason"]
    assert failed["preemptionSummary"]["preemptedAttemptCount"] == 1


def test_a_raised_priority_starts_first(batch: Any, sagemaker: Any, unique: str) -> None:
    queue = f"gpu-{unique}"
    create_design(batch, quota_file(queue, 1, share("team", "RESERVE", 1)))
    running = submit(batch, queue, "first", "team", 1, duration_s="60")
    early = submit(batch, queue, "early", "team", 1, duration_s="1")
    late = submit(batch, queue, "late", "team", 1, duration_s="60", schedulingPriority=0)
    front = batch.get_job_queue_snapshot(jobQueue=queue)["frontOfQueue"]["jobs"]
    assert [job["jobArn"].rsplit("/", 1)[1] for job in front] == [early, late]

    batch.update_service_job(jobId=late, schedulingPriority=10)
    assert batch.describe_service_job(jobId=late)["schedulingPriority"] == 10
    front = batch.get_job_queue_snapshot(jobQueue=queue)["frontOfQueue"]["jobs"]
    assert [job["jobArn"].rsplit("/", 1)[1] for job in front] == [late, early]
    finish_training(sagemaker, training_job_name(attempt_arn(batch, running)))
    wait_for("the first job to end", lambda: status(batch, running) == "SUCCEEDED")
    wait_for("the raised job to start", lambda: status(batch, late) != "RUNNABLE")
    assert status(batch, early) == "RUNNABLE"
    batch.terminate_service_jobs(jobs=[late, early], reason="done")


def test_the_same_client_token_submits_once(batch: Any, lending_queue: str) -> None:
    training_job = f"retried-{lending_queue}"
    first = submit(
        batch,
        lending_queue,
        "retried",
        "nlp",
        1,
        training_job_name=training_job,
        clientToken="dag.task.run.-1",
    )
    # AWS's documentation: of two identical requests with one clientToken "the second request is rejected"
    # (the emulator's default; the emulator of REPLAYING_REGION answers the first job instead).
    with pytest.raises(ClientError, match="was already used by an identical request") as rejected:
        submit(
            batch,
            lending_queue,
            "retried",
            "nlp",
            1,
            training_job_name=training_job,
            clientToken="dag.task.run.-1",
        )
    assert rejected.value.response["Error"]["Code"] == "ClientException"
    listed = batch.list_service_jobs(
        jobQueue=lending_queue, filters=[{"name": "JOB_NAME", "values": ["retried"]}]
    )["jobSummaryList"]
    assert [job["jobId"] for job in listed] == [first]

    with pytest.raises(ClientError, match=r"clientToken dag\.task\.run\.-1 was already used") as refused:
        submit(batch, lending_queue, "retried", "nlp", 2, clientToken="dag.task.run.-1")
    assert refused.value.response["Error"]["Code"] == "ClientException"


def test_terminate_stops_a_running_job_and_fails_a_waiting_one(
    batch: Any, sagemaker: Any, unique: str
) -> None:
    queue = f"gpu-{unique}"
    create_design(batch, quota_file(queue, 1, share("team", "RESERVE", 1)))
    running = submit(batch, queue, "running", "team", 1)
    waiting = submit(batch, queue, "waiting", "team", 1)
    wait_for("the first job to run", lambda: status(batch, running) == "RUNNING")
    training_job = batch.describe_service_job(jobId=running)["latestAttempt"]["serviceResourceId"]["value"]

    batch.terminate_service_job(jobId=waiting, reason="not needed")
    ended = batch.describe_service_job(jobId=waiting)
    assert (ended["status"], ended["statusReason"], ended["isTerminated"]) == ("FAILED", "not needed", True)
    assert "attempts" not in ended or ended["attempts"] == []

    batch.terminate_service_job(jobId=running, reason="cancelled by the user")
    assert batch.describe_service_job(jobId=running)["isTerminated"] is True
    ended = wait_for(
        "the running job to fail",
        lambda: (d := batch.describe_service_job(jobId=running))["status"] == "FAILED" and d,
    )
    assert ended["statusReason"] == "cancelled by the user"
    assert (
        sagemaker.describe_training_job(TrainingJobName=training_job_name(training_job))["TrainingJobStatus"]
        == "Stopped"
    )
    assert "preemptionSummary" not in ended


def test_the_designs_answers_import_as_the_quota_file(batch: Any, unique: str) -> None:
    """What Describe*/List* answer about a design created from export's bodies imports back unchanged."""
    queue = f"gpu-{unique}"
    document = quota_file(
        queue,
        4,
        share("research", "LEND", 2, inSharePreemption="ENABLED"),
        share("nlp", "LEND_AND_BORROW", 2, borrow_limit=50),
    )
    bundle = create_design(batch, document)
    answers = [
        ("se.json", batch.describe_service_environments(serviceEnvironments=[queue])),
        ("jq.json", batch.describe_job_queues(jobQueues=[queue])),
        ("sp.json", batch.describe_scheduling_policies(arns=[bundle["jobQueues"][0]["schedulingPolicyArn"]])),
        ("shares.json", batch.list_quota_shares(jobQueue=queue)),
    ]
    one_share = batch.list_quota_shares(jobQueue=queue)["quotaShares"][1]
    answers.append(("nlp.json", batch.describe_quota_share(quotaShareArn=one_share["quotaShareArn"])))
    cleaned = [
        (name, {k: v for k, v in answer.items() if k != "ResponseMetadata"}) for name, answer in answers
    ]
    design = import_design(cleaned)
    assert design.config == parse_quota_config(document, "test")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda b, q: submit(b, q, "job", "nobody", 1),
            "quotaShareName 'nobody' is not a quota share of job queue gpu-.*: use one of research, nlp",
        ),
        (
            lambda b, q: submit(b, q, "job", "nlp", 1, shareIdentifier="nlp"),
            "give quotaShareName, not shareIdentifier",
        ),
        (lambda b, q: submit(b, q, "job", "nlp", 1, schedulingPriority=10000), "give 0 to 9999"),
        (lambda b, q: submit(b, "nowhere", "job", "nlp", 1), "Job queue nowhere does not exist"),
        (lambda b, q: b.describe_service_job(jobId="no-such-job"), "Service job no-such-job does not exist"),
        (
            lambda b, q: b.create_quota_share(**share("late", "LEND", 1, borrow_limit=10), jobQueue=q),
            "borrowLimit is only allowed with the LEND_AND_BORROW strategy",
        ),
    ],
    ids=["unknown share", "share identifier", "priority", "unknown queue", "unknown job", "borrow limit"],
)
def test_a_wrong_request_is_a_client_exception_saying_what_to_fix(
    batch: Any, lending_queue: str, call: Callable[[Any, str], Any], message: str
) -> None:
    with pytest.raises(ClientError, match=message) as refused:
        call(batch, lending_queue)
    assert refused.value.response["Error"]["Code"] == "ClientException"


def test_a_queue_without_a_quota_share_policy_takes_no_quota_share(batch: Any, unique: str) -> None:
    environment = batch.create_service_environment(
        serviceEnvironmentName=f"se-{unique}",
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 1}],
    )
    batch.create_job_queue(
        jobQueueName=f"gpu-{unique}",
        priority=1,
        jobQueueType="SAGEMAKER_TRAINING",
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": environment["serviceEnvironmentArn"]}],
    )
    with pytest.raises(ClientError, match="has no scheduling policy with a quotaSharePolicy"):
        batch.create_quota_share(**share("team", "RESERVE", 1), jobQueue=f"gpu-{unique}")


def test_in_share_preemption_stops_the_lower_priority_job_and_its_retry_resumes_from_the_checkpoint(
    batch: Any, sagemaker: Any, unique: str
) -> None:
    queue = f"gpu-{unique}"
    create_design(batch, quota_file(queue, 2, share("team", "RESERVE", 2, inSharePreemption="ENABLED")))
    low = submit(batch, queue, "sweep", "team", 2, duration_s="60,0.2", schedulingPriority=1)
    wait_for("the low-priority job to run", lambda: status(batch, low) == "RUNNING")

    high = submit(batch, queue, "urgent", "team", 2, duration_s="0.2", schedulingPriority=100)
    preempted = wait_for(
        "the low-priority job's preemption",
        lambda: (d := batch.describe_service_job(jobId=low)).get("preemptionSummary") and d,
    )
    reason = preempted["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"]
    assert reason == f"Preempted by {high} (IN_SHARE_PRIORITY)"
    wait_for("the low-priority job to succeed", lambda: status(batch, low) == "SUCCEEDED", timeout_s=60)
    assert status(batch, high) == "SUCCEEDED"

    # Both attempts train from the same checkpoint prefix: the second resumes where the first stopped.
    attempts = batch.describe_service_job(jobId=low)["attempts"]
    checkpoints = {
        sagemaker.describe_training_job(TrainingJobName=training_job_name(a["serviceResourceId"]["value"]))[
            "CheckpointConfig"
        ]["S3Uri"]
        for a in attempts
    }
    assert len(attempts) == 2 and checkpoints == {"s3://team-a-models/llm/checkpoints/sweep/"}


def test_an_attempt_past_its_timeout_is_stopped_and_fails_the_job(
    batch: Any, sagemaker: Any, unique: str
) -> None:
    queue = f"gpu-{unique}"
    create_design(batch, quota_file(queue, 1, share("team", "RESERVE", 1)))
    job = submit(
        batch, queue, "slow", "team", 1, duration_s="60", timeoutConfig={"attemptDurationSeconds": 1}
    )
    failed = wait_for(
        "the job to fail", lambda: (d := batch.describe_service_job(jobId=job))["status"] == "FAILED" and d
    )
    assert failed["statusReason"] == "Attempt ran longer than timeoutConfig.attemptDurationSeconds (1 s)"
    training_job = training_job_name(failed["latestAttempt"]["serviceResourceId"]["value"])
    assert sagemaker.describe_training_job(TrainingJobName=training_job)["TrainingJobStatus"] == "Stopped"


def test_a_payload_sagemaker_refuses_fails_the_job_saying_why(batch: Any, unique: str) -> None:
    queue = f"gpu-{unique}"
    create_design(batch, quota_file(queue, 1, share("team", "RESERVE", 1)))
    job = submit(batch, queue, "bad", "team", 1, training_job_name="not_a_sagemaker_name")
    failed = wait_for(
        "the job to fail", lambda: (d := batch.describe_service_job(jobId=job))["status"] == "FAILED" and d
    )
    assert failed["statusReason"].startswith("CreateTrainingJob: ValidationException: 1 validation error")
    assert "attempts" not in failed or failed["attempts"] == []


def test_list_service_jobs_filters_as_documented_and_terminate_service_jobs_reports_each(
    batch: Any, unique: str
) -> None:
    queue = f"gpu-{unique}"
    create_design(batch, quota_file(queue, 1, share("a", "RESERVE", 1), share("b", "LEND", 0)))
    running = submit(batch, queue, "sweep-1", "a", 1)
    waiting = submit(batch, queue, "sweep-2", "a", 1)
    other = submit(batch, queue, "other", "b", 1)
    wait_for("the first job to run", lambda: status(batch, running) == "RUNNING")

    def listed(**request: Any) -> list[str]:
        return [job["jobId"] for job in batch.list_service_jobs(jobQueue=queue, **request)["jobSummaryList"]]

    assert listed() == [running]  # no jobStatus and no filter: RUNNING jobs only
    assert listed(jobStatus="RUNNABLE") == [other, waiting]  # the most recent first
    assert listed(filters=[{"name": "JOB_NAME", "values": ["SWEEP*"]}]) == [waiting, running]
    assert listed(jobStatus="RUNNABLE", filters=[{"name": "QUOTA_SHARE_NAME", "values": ["a"]}]) == [waiting]

    answer = batch.terminate_service_jobs(jobs=[waiting, other, "no-such-job"], reason="sweep cancelled")
    assert answer["successful"] == [waiting, other]
    assert [(e["job"], e["code"]) for e in answer["errors"]] == [("no-such-job", "ClientException")]
    assert {status(batch, job) for job in (waiting, other)} == {"FAILED"}
    batch.terminate_service_job(jobId=running, reason="done")


def test_updates_change_what_describe_answers_and_unknown_names_are_left_out(
    batch: Any, unique: str, answers: AnswerLog
) -> None:
    """UpdateServiceEnvironment, UpdateSchedulingPolicy and UpdateJobQueue (what ``apply --to-aws`` sends),
    ListSchedulingPolicies listing the quota-share policies, and Describe* leaving out unknown names."""
    queue = f"gpu-{unique}"
    bundle = create_design(batch, quota_file(queue, 4, share("research", "LEND", 2)))
    policy_arn = next(
        p["arn"] for p in batch.list_scheduling_policies()["schedulingPolicies"] if p["arn"].endswith(queue)
    )

    batch.update_service_environment(
        serviceEnvironment=queue, capacityLimits=[{"capacityUnit": UNIT, "maxCapacity": 6}]
    )
    batch.update_scheduling_policy(
        arn=policy_arn, quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}
    )
    batch.update_job_queue(jobQueue=queue, priority=7, schedulingPolicyArn=policy_arn)

    environments = batch.describe_service_environments(serviceEnvironments=[queue, f"none-{unique}"])
    assert [e["capacityLimits"] for e in environments["serviceEnvironments"]] == [
        [{"capacityUnit": UNIT, "maxCapacity": 6}]
    ]
    (job_queue,) = batch.describe_job_queues(jobQueues=[queue])["jobQueues"]
    assert (job_queue["priority"], job_queue["schedulingPolicyArn"]) == (7, policy_arn)
    assert policy_arn.endswith(bundle["schedulingPolicies"][0]["name"])
    with pytest.raises(ClientError, match="fairsharePolicy: this scheduling policy has a quotaSharePolicy"):
        batch.update_scheduling_policy(arn=policy_arn, fairsharePolicy={"shareDecaySeconds": 1})
    assert {
        "UpdateServiceEnvironment",
        "UpdateSchedulingPolicy",
        "UpdateJobQueue",
        "ListSchedulingPolicies",
    } <= set(answers.checked)


def test_resources_on_request_are_invisible_then_creating_then_valid_and_refused_until_valid(
    batch: Any, endpoint_url: str, unique: str, answers: AnswerLog
) -> None:
    """What ``apply --to-aws`` has to wait out (``emulator_behaviour``): a resource left out of Describe and
    List answers right after its Create, then CREATING, then VALID; a job queue naming a service environment
    that is not VALID yet and a quota share on a job queue not VALID yet are refused, as AWS refuses them."""
    queue = f"slow-{unique}"
    emulator_behaviour(endpoint_url, queue, invisibleSeconds=0.6, creatingSeconds=1.2)
    bundle = create_design(batch, quota_file(f"fast-{unique}", 2, share("a", "LEND", 1)))  # other prefix
    environment = {**bundle["serviceEnvironments"][0], "serviceEnvironmentName": queue}
    batch.create_service_environment(**environment)

    assert batch.describe_service_environments(serviceEnvironments=[queue])["serviceEnvironments"] == []
    job_queue = {
        **bundle["jobQueues"][0],
        "jobQueueName": queue,
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": queue}],
    }
    with pytest.raises(ClientError, match=f"Service environment {queue} does not exist"):
        batch.create_job_queue(**job_queue)

    def environment_status() -> str | None:
        found = batch.describe_service_environments(serviceEnvironments=[queue])["serviceEnvironments"]
        return found[0]["status"] if found else None

    wait_for("the service environment to show", lambda: environment_status() is not None, timeout_s=10)
    assert environment_status() == "CREATING"
    with pytest.raises(ClientError, match=f"Service environment {queue} is CREATING: .* once it is VALID"):
        batch.create_job_queue(**job_queue)
    with pytest.raises(ClientError, match=f"Service environment {queue} is CREATING: update it once"):
        batch.update_service_environment(serviceEnvironment=queue, state="ENABLED")
    wait_for("the service environment to be VALID", lambda: environment_status() == "VALID", timeout_s=10)

    batch.create_job_queue(**job_queue)
    wait_for("the job queue to show", lambda: batch.describe_job_queues(jobQueues=[queue])["jobQueues"])
    (described,) = batch.describe_job_queues(jobQueues=[queue])["jobQueues"]
    assert (described["status"], described["statusReason"]) == ("CREATING", "Creating")
    with pytest.raises(ClientError, match=f"Job queue {queue} is CREATING: create its quota shares once"):
        batch.create_quota_share(jobQueue=queue, **share("a", "LEND", 1))


def test_on_request_a_resource_ends_invalid_an_update_is_updating_and_an_operation_is_refused(
    batch: Any, endpoint_url: str, unique: str, answers: AnswerLog
) -> None:
    bad, slow, refused = f"bad-{unique}", f"slow-{unique}", f"refused-{unique}"
    emulator_behaviour(endpoint_url, slow, updatingSeconds=30)
    emulator_behaviour(endpoint_url, refused, refuse={"CreateQuotaShare": "Throttled by the test"})
    create_design(batch, quota_file(slow, 2, share("a", "LEND", 1)))
    bundle = export_design(parse_quota_config(quota_file(bad, 2, share("a", "LEND", 1)), "test"))
    batch.create_service_environment(**bundle["serviceEnvironments"][0])
    batch.create_scheduling_policy(**bundle["schedulingPolicies"][0])
    emulator_behaviour(endpoint_url, bad, invalidReason="CLIENT_ERROR - the role cannot be assumed")
    batch.create_job_queue(**bundle["jobQueues"][0])  # it alone: what is created from now on

    (invalid,) = batch.describe_job_queues(jobQueues=[bad])["jobQueues"]
    assert (invalid["status"], invalid["statusReason"]) == (
        "INVALID",
        "CLIENT_ERROR - the role cannot be assumed",
    )
    (slow_share,) = batch.list_quota_shares(jobQueue=slow)["quotaShares"]
    assert slow_share["status"] == "VALID"
    batch.update_quota_share(quotaShareArn=slow_share["quotaShareArn"], state="DISABLED")
    (updating,) = batch.list_quota_shares(jobQueue=slow)["quotaShares"]
    assert (updating["status"], updating["state"]) == ("UPDATING", "DISABLED")
    with pytest.raises(ClientError, match="Quota share a is UPDATING: update it once it is VALID"):
        batch.update_quota_share(quotaShareArn=slow_share["quotaShareArn"], state="ENABLED")
    with pytest.raises(ClientError, match="Throttled by the test"):
        create_design(batch, quota_file(refused, 2, share("a", "LEND", 1)))
    emulator_behaviour(endpoint_url, refused)  # as at once again
    batch.create_quota_share(jobQueue=refused, **share("a", "LEND", 1))


def test_what_aws_refuses_beyond_botocores_validator_is_refused(batch: Any, unique: str) -> None:
    queue = f"limits-{unique}"
    create_design(batch, quota_file(queue, 40, *(share(f"s{i}", "LEND", 1) for i in range(20))))

    with pytest.raises(
        ClientError, match=f"Job queue {queue} has 20 quota shares: a job queue has at most 20"
    ):
        batch.create_quota_share(jobQueue=queue, **share("s20", "LEND", 1))
    with pytest.raises(ClientError, match="capacityUnit local-gpu is not a SageMaker instance type"):
        batch.create_service_environment(
            serviceEnvironmentName=f"local-{unique}",
            serviceEnvironmentType="SAGEMAKER_TRAINING",
            capacityLimits=[{"capacityUnit": "local-gpu", "maxCapacity": 2}],
        )
    with pytest.raises(ClientError, match="priority 1001: a job queue's priority is 0 to 1000"):
        batch.update_job_queue(jobQueue=queue, priority=1001)
