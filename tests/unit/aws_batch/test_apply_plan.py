"""``plan_apply``: what ``apply --to-aws`` would send, from the export's bodies and AWS's answers (no AWS)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_quota.aws_batch.apply_plan import AwsState, plan_apply, plan_calls
from airflow_quota.aws_batch.design import import_design
from airflow_quota.aws_batch.export import defaulted_fields, export_design
from airflow_quota.engine.config import parse_quota_config

ARN = "arn:aws:batch:us-east-1:123456789012"
UNIT = "ml.g5.xlarge"


def bundle(scheduler: str | None = None, **queue_fields: Any) -> dict[str, list[dict[str, Any]]]:
    queue: dict[str, Any] = {
        "jobQueueName": "q",
        "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 4}],
        "quotaShares": [
            {
                "quotaShareName": "a",
                "capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 2}],
                "resourceSharingConfiguration": {"strategy": "LEND"},
                "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
            }
        ],
        **({} if scheduler is None else {"scheduler": scheduler}),
        **queue_fields,
    }
    return export_design(parse_quota_config({"jobQueues": [queue]}, "test"))


def aws_has(**queue_changes: Any) -> AwsState:
    """What DescribeJobQueues and the others answer for ``bundle(scheduler="AWS_BATCH")`` created in AWS
    (ARNs, status), the job queue's answer changed by ``queue_changes``."""
    exported = bundle(scheduler="AWS_BATCH")
    environment = {
        **exported["serviceEnvironments"][0],
        "serviceEnvironmentArn": f"{ARN}:service-environment/q",
        "status": "VALID",
    }
    policy = {**exported["schedulingPolicies"][0], "arn": f"{ARN}:scheduling-policy/q"}
    queue = {
        **exported["jobQueues"][0],
        "jobQueueArn": f"{ARN}:job-queue/q",
        "schedulingPolicyArn": f"{ARN}:scheduling-policy/q",
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": f"{ARN}:service-environment/q"}],
        "status": "VALID",
        **queue_changes,
    }
    share = {
        **{k: v for k, v in exported["quotaShares"][0].items() if k != "jobQueue"},
        "quotaShareArn": f"{ARN}:job-queue/q/quota-share/a",
        "jobQueueArn": f"{ARN}:job-queue/q",
        "status": "VALID",
    }
    legacy = {**share, "quotaShareName": "legacy", "quotaShareArn": f"{ARN}:job-queue/q/quota-share/legacy"}
    return AwsState({"q": environment}, {"q": policy}, {"q": queue}, {"q": {"a": share, "legacy": legacy}})


def test_what_aws_answers_with_arns_is_unchanged_and_a_share_the_file_lacks_is_left_out() -> None:
    plan = plan_apply(bundle(scheduler="AWS_BATCH"), aws_has())

    assert [(c.kind, c.action, c.fields) for c in plan.changes] == [
        ("serviceEnvironments", "unchanged", ()),
        ("schedulingPolicies", "unchanged", ()),
        ("jobQueues", "unchanged", ()),
        ("quotaShares", "unchanged", ()),
    ]
    assert plan.pending() == [] and plan.refusals == []
    assert [left.title for left in plan.left_out] == ["quota share legacy (job queue q)"]


@pytest.mark.parametrize(
    ("in_aws", "refusal", "sent", "tags"),
    [
        ({"priority": 5}, None, {"jobQueue": f"{ARN}:job-queue/q", "priority": 1}, None),
        (
            {"jobQueueType": "ECS"},
            "job queue q: jobQueueType is 'ECS' in AWS and 'SAGEMAKER_TRAINING' in the file, and "
            "UpdateJobQueue cannot change jobQueueType",
            None,
            None,
        ),
        ({"tags": {"team": "ml"}}, None, None, {"airflow-quota:scheduler": "AWS_BATCH"}),
    ],
    ids=["priority: UpdateJobQueue", "type: refused, nothing sent", "tags: TagResource, added only"],
)
def test_a_changed_job_queue_is_updated_refused_or_tagged(
    in_aws: dict[str, Any], refusal: str | None, sent: dict[str, Any] | None, tags: dict[str, str] | None
) -> None:
    plan = plan_apply(bundle(scheduler="AWS_BATCH"), aws_has(**in_aws))

    queue = plan.changes[2]
    assert (queue.request, queue.tags) == (sent, tags)
    assert len(plan.refusals) == (1 if refusal else 0)
    if refusal:
        assert plan.refusals[0].startswith(refusal)


def with_share(**share_changes: Any) -> AwsState:
    state = aws_has()
    share = {**state.quota_shares["q"]["a"], **share_changes}
    return AwsState(
        state.service_environments, state.scheduling_policies, state.job_queues, {"q": {"a": share}}
    )


@pytest.mark.parametrize(
    ("share_in_aws", "fields", "sent"),
    [
        ({"resourceSharingConfiguration": {"strategy": "LEND", "borrowLimit": -1}}, [], None),
        (
            {
                "capacityLimits": [
                    {"capacityUnit": UNIT, "maxCapacity": 2},
                    {"capacityUnit": "ml.p4d.24xlarge", "maxCapacity": 1},
                ]
            },
            [("capacityLimits.ml.p4d.24xlarge", 1, None)],
            ["quotaShareArn", "capacityLimits"],
        ),
        (
            {"preemptionConfiguration": {"inSharePreemption": "ENABLED"}, "state": "DISABLED"},
            [
                ("preemptionConfiguration.inSharePreemption", "ENABLED", "DISABLED"),
                ("state", "DISABLED", "ENABLED"),
            ],
            ["quotaShareArn", "preemptionConfiguration", "state"],
        ),
    ],
    ids=["a default only AWS shows: unchanged", "a unit the file drops", "two fields: both, nothing else"],
)
def test_a_share_sends_only_what_the_file_changes(
    share_in_aws: dict[str, Any], fields: list[tuple[str, Any, Any]], sent: list[str] | None
) -> None:
    share = plan_apply(bundle(scheduler="AWS_BATCH"), with_share(**share_in_aws)).changes[3]

    assert [(f.path, f.old, f.new) for f in share.fields] == fields
    assert (None if share.request is None else list(share.request)) == sent


# --- what the file leaves out stays as AWS has it; lowering and re-pointing are guarded (issue 35) ---------


def test_a_queue_keeps_what_the_file_leaves_out_and_the_bodies_take_aws_names() -> None:
    state = aws_has(
        priority=5,
        state="DISABLED",
        schedulingPolicyArn=f"{ARN}:scheduling-policy/quota",
        serviceEnvironmentOrder=[{"order": 2, "serviceEnvironment": f"{ARN}:service-environment/ml-g5"}],
    )
    environment = {**state.service_environments["q"], "serviceEnvironmentName": "ml-g5"}
    policy = {**state.scheduling_policies["q"], "name": "quota", "arn": f"{ARN}:scheduling-policy/quota"}
    state = AwsState({"ml-g5": environment}, {"quota": policy}, state.job_queues, state.quota_shares)
    exported = bundle(scheduler="AWS_BATCH")
    config = parse_quota_config(
        {"jobQueues": [{**import_design([("aws.json", exported)]).document["jobQueues"][0]}]}, "test"
    )

    plan = plan_apply(exported, state, defaulted_fields(config))

    assert [(c.title, c.action, c.fields) for c in plan.changes[:3]] == [
        ("service environment ml-g5", "unchanged", ()),
        ("scheduling policy quota", "unchanged", ()),
        ("job queue q", "unchanged", ()),
    ]
    assert plan.pending() == [] and plan.refusals == [] and plan.guarded == []


@pytest.mark.parametrize(
    ("share_in_aws", "guard", "message"),
    [
        (
            {"capacityLimits": [{"capacityUnit": UNIT, "maxCapacity": 3}]},
            "lower",
            f"capacityLimits.{UNIT} 3 -> 2",
        ),
        (
            {"resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW"}},
            "lower",
            "strategy LEND_AND_BORROW -> LEND",
        ),
        ({"state": "ENABLED"}, None, None),
        ({"resourceSharingConfiguration": {"strategy": "RESERVE"}}, None, None),
    ],
    ids=["capacity down", "borrowing taken away", "state unchanged", "more sharing"],
)
def test_an_update_that_lowers_a_share_is_guarded(
    share_in_aws: dict[str, Any], guard: str | None, message: str | None
) -> None:
    plan = plan_apply(bundle(scheduler="AWS_BATCH"), with_share(**share_in_aws))

    assert [(g.guard, message is not None and message in g.message) for g in plan.guarded] == (
        [] if guard is None else [(guard, True)]
    )
    assert plan.blocked(["lower"]) == []


def test_re_pointing_a_queue_is_guarded_and_calls_are_listed_in_order() -> None:
    plan = plan_apply(
        bundle(scheduler="AWS_BATCH"), aws_has(schedulingPolicyArn=f"{ARN}:scheduling-policy/other")
    )

    assert [g.guard for g in plan.guarded] == ["repoint"]
    assert "pass --allow-repoint" in plan.blocked()[0]
    assert [call.operation for call in plan_calls(plan.pending())] == ["UpdateJobQueue", "DescribeJobQueues"]


ACTION = {
    "reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
    "state": "RUNNABLE",
    "maxTimeSeconds": 3600,
    "action": "TERMINATE",
}


def test_a_queues_time_limit_actions_the_file_gives_are_sent_and_those_it_leaves_out_stay_as_in_aws() -> None:
    added = plan_apply(bundle(scheduler="AWS_BATCH", jobStateTimeLimitActions=[ACTION]), aws_has())
    kept = plan_apply(bundle(scheduler="AWS_BATCH"), aws_has(jobStateTimeLimitActions=[ACTION]))

    assert added.changes[2].request == {
        "jobQueue": f"{ARN}:job-queue/q",
        "jobStateTimeLimitActions": [ACTION],
    }
    assert (kept.changes[2].action, kept.changes[2].request) == ("unchanged", None)
