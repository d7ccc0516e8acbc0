"""A quota design in and out of AWS Batch's documents, checked by the installed botocore model and validator.

``generated_documents`` prints the figures of the generated documents' import:
``.venv/bin/python -m tests.unit.aws_batch.generated_documents``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from botocore.validate import ParamValidator
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_quota.aws_batch.botocore_model import CREATE_OPERATION, KINDS, batch_model
from airflow_quota.aws_batch.design import import_design, is_aws_document
from airflow_quota.aws_batch.export import export_design
from airflow_quota.aws_batch.portability import portability_warnings
from airflow_quota.config_file import load_quota_file
from airflow_quota.engine.config import QuotaConfig, QuotaConfigError, parse_quota_config
from tests.unit.aws_batch.generated_documents import generated_designs, import_figures

ROOT = Path(__file__).parents[3]
QUOTA_FILES = [ROOT / "examples" / "quotas.yaml", ROOT / "demo" / "quotas.yaml"]
ARN = "arn:aws:batch:us-east-1:123456789012"
QUEUE_ARN = f"{ARN}:job-queue/gpu-training"


def botocore_errors(bundle: dict[str, list[dict[str, Any]]]) -> list[str]:
    """botocore's own report for every request body, straight from its validator and the installed model."""
    model = batch_model()
    reports = []
    for kind in KINDS:
        shape = model.operation_model(CREATE_OPERATION[kind]).input_shape
        for body in bundle[kind]:
            report = ParamValidator().validate(body, shape)
            if report.has_errors():
                reports.append(f"{kind}: {report.generate_report()}")
    return reports


def same_design(first: QuotaConfig, second: QuotaConfig) -> bool:
    return first.to_job_queues() == second.to_job_queues() and export_design(first) == export_design(second)


def share(name: str, *limits: tuple[str, int], **extra: Any) -> dict[str, Any]:
    return {
        "quotaShareName": name,
        "capacityLimits": [{"capacityUnit": unit, "maxCapacity": count} for unit, count in limits],
        "resourceSharingConfiguration": {"strategy": "LEND"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
        **extra,
    }


def queue_file(capacity: list[tuple[str, int]], shares: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "jobQueues": [
            {
                "jobQueueName": "q",
                "capacityLimits": [{"capacityUnit": unit, "maxCapacity": count} for unit, count in capacity],
                "quotaShares": shares,
            }
        ]
    }


# --- export --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", QUOTA_FILES, ids=lambda path: path.parent.name)
def test_every_exported_body_passes_botocores_validator(path: Path) -> None:
    bundle = export_design(load_quota_file(path))

    assert list(bundle) == ["serviceEnvironments", "schedulingPolicies", "jobQueues", "quotaShares"]
    assert all(bundle[kind] for kind in KINDS)
    assert botocore_errors(bundle) == []


def test_export_writes_each_share_in_create_quota_shares_shape() -> None:
    bundle = export_design(load_quota_file(QUOTA_FILES[0]), region="eu-west-1", account_id="111122223333")

    assert bundle["jobQueues"][0]["schedulingPolicyArn"] == (
        "arn:aws:batch:eu-west-1:111122223333:scheduling-policy/gpu-training"
    )
    research = next(share for share in bundle["quotaShares"] if share["quotaShareName"] == "research")
    assert research == {
        "quotaShareName": "research",
        "jobQueue": "gpu-training",
        "capacityLimits": [
            {"capacityUnit": "ml.p4d.24xlarge", "maxCapacity": 4},
            {"capacityUnit": "ml.g5.12xlarge", "maxCapacity": 4},
        ],
        "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 200},
        "preemptionConfiguration": {"inSharePreemption": "ENABLED"},
        "state": "ENABLED",
    }


# --- round trip ----------------------------------------------------------------------------------------

UNITS = ["ml.g5.xlarge", "ml.p4d.24xlarge", "ml.g5.12xlarge", "local-gpu"]


@st.composite
def quota_designs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid quota files: 1-3 job queues of 1-3 units, 1-4 shares whose limits fit the queue's capacity,
    every strategy, borrowLimit absent, -1 or a percentage, optional preemptionConfiguration and state, an
    optional scheduler, and the job queue's optional priority, state, scheduling policy (shared or not) and
    service environment."""
    queues = []
    local_used = False
    for queue_index in range(draw(st.integers(1, 3))):
        units = draw(
            st.lists(st.sampled_from(UNITS[:3] if local_used else UNITS), min_size=1, max_size=3, unique=True)
        )
        local_used = local_used or "local-gpu" in units
        capacity = {unit: draw(st.integers(0, 50)) for unit in units}
        left = dict(capacity)
        shares = []
        for share_index in range(draw(st.integers(1, 4))):
            share_units = draw(st.lists(st.sampled_from(units), min_size=1, unique=True))
            limits = []
            for unit in share_units:
                limit = draw(st.integers(0, left[unit]))
                left[unit] -= limit
                limits.append({"capacityUnit": unit, "maxCapacity": limit})
            strategy = draw(st.sampled_from(["RESERVE", "LEND", "LEND_AND_BORROW"]))
            sharing: dict[str, Any] = {"strategy": strategy}
            if strategy == "LEND_AND_BORROW" and draw(st.booleans()):
                sharing["borrowLimit"] = draw(st.sampled_from([-1, 0, 50, 200, 10_000_000]))
            share: dict[str, Any] = {
                "quotaShareName": f"share-{share_index}",
                "capacityLimits": limits,
                "resourceSharingConfiguration": sharing,
            }
            if draw(st.booleans()):
                share["preemptionConfiguration"] = {
                    "inSharePreemption": draw(st.sampled_from(["ENABLED", "DISABLED"]))
                }
            if draw(st.booleans()):
                share["state"] = draw(st.sampled_from(["ENABLED", "DISABLED"]))
            shares.append(share)
        queue: dict[str, Any] = {
            "jobQueueName": f"queue-{queue_index}",
            "capacityLimits": [
                {"capacityUnit": unit, "maxCapacity": count} for unit, count in capacity.items()
            ],
            "quotaShares": shares,
        }
        scheduler = draw(st.sampled_from([None, "AIRFLOW", "AWS_BATCH"]))
        if scheduler is not None:
            queue["scheduler"] = scheduler
        # The job queue's optional AWS fields (issue 35: kept through import, the file and export).
        if draw(st.booleans()):
            queue["priority"] = draw(st.sampled_from([0, 1, 5, 1000]))
        if draw(st.booleans()):
            queue["state"] = draw(st.sampled_from(["ENABLED", "DISABLED"]))
        if draw(st.booleans()):
            queue["schedulingPolicyArn"] = draw(st.sampled_from(["quota", f"policy-{queue_index}"]))
        if draw(st.booleans()):
            environment = {"order": draw(st.sampled_from([1, 2])), "serviceEnvironment": f"env-{queue_index}"}
            queue["serviceEnvironmentOrder"] = [environment]
        queues.append(queue)
    return {"jobQueues": queues}


@settings(max_examples=150, deadline=None)
@given(quota_designs())
def test_export_then_import_gives_the_same_design(raw: dict[str, Any]) -> None:
    config = parse_quota_config(raw, "quotas.yaml")
    bundle = export_design(config)

    assert botocore_errors(bundle) == []
    imported = import_design([("aws.json", bundle)])
    assert same_design(imported.config, config)
    assert imported.notes == []


@settings(max_examples=50, deadline=None)
@given(quota_designs())
def test_export_split_into_one_file_per_body_imports_the_same_design(raw: dict[str, Any]) -> None:
    config = parse_quota_config(raw, "quotas.yaml")
    bundle = export_design(config)
    files = [(f"{kind}-{index}.json", body) for kind in KINDS for index, body in enumerate(bundle[kind])]

    assert same_design(import_design(files).config, config)


# --- import of AWS's answers ---------------------------------------------------------------------------

#: AWS's reference scenario (research/quota-semantics.md 1.7) as the AWS CLI prints it.
DESCRIBED = {
    "serviceEnvironments": [
        {
            "serviceEnvironmentName": "ml-g5",
            "serviceEnvironmentArn": f"{ARN}:service-environment/ml-g5",
            "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "state": "ENABLED",
            "status": "VALID",
            "capacityLimits": [{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}],
            "tags": {"team": "platform"},
        }
    ],
    "jobQueues": [
        {
            "jobQueueName": "gpu-training",
            "jobQueueArn": QUEUE_ARN,
            "state": "ENABLED",
            "schedulingPolicyArn": f"{ARN}:scheduling-policy/quota",
            "status": "VALID",
            "statusReason": "JobQueue Healthy",
            "priority": 1,
            "computeEnvironmentOrder": [],
            "serviceEnvironmentOrder": [
                {"order": 1, "serviceEnvironment": f"{ARN}:service-environment/ml-g5"}
            ],
            "jobQueueType": "SAGEMAKER_TRAINING",
        }
    ],
    "schedulingPolicies": [
        {
            "name": "quota",
            "arn": f"{ARN}:scheduling-policy/quota",
            "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"},
        }
    ],
}
LISTED_SHARES = {
    "quotaShares": [
        {
            "quotaShareName": name,
            "quotaShareArn": f"{QUEUE_ARN}/quota-share/{name}",
            "jobQueueArn": QUEUE_ARN,
            "capacityLimits": [{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}],
            "resourceSharingConfiguration": sharing,
            "preemptionConfiguration": {"inSharePreemption": in_share},
            "state": "ENABLED",
            "status": "VALID",
        }
        for name, sharing, in_share in (
            ("qs1", {"strategy": "LEND_AND_BORROW", "borrowLimit": 200}, "ENABLED"),
            ("qs2", {"strategy": "LEND"}, "DISABLED"),
            ("qs3", {"strategy": "RESERVE"}, "DISABLED"),
        )
    ],
    "nextToken": None,
}


def test_describe_and_list_answers_import_with_arns_resolved_and_status_ignored() -> None:
    design = import_design([("described.json", DESCRIBED), ("shares.json", LISTED_SHARES)])

    assert design.document == {
        "jobQueues": [
            {
                "jobQueueName": "gpu-training",
                "capacityLimits": [{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}],
                "quotaShares": [
                    {
                        key: share[key]
                        for key in share
                        if key not in ("quotaShareArn", "jobQueueArn", "status")
                    }
                    for share in LISTED_SHARES["quotaShares"]
                ],
                # Kept (issue 35): export names them after the job queue unless the file says.
                "schedulingPolicyArn": "quota",
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "ml-g5"}],
            }
        ]
    }
    assert [(note.path, note.message) for note in design.notes] == [
        ("described.json:serviceEnvironments[0].tags", "the service environment's tags are not kept")
    ]


def test_describe_quota_share_answer_names_its_job_queue_by_arn_and_keeps_a_duplicate_once() -> None:
    described_share = {**LISTED_SHARES["quotaShares"][1], "tags": {"cost-centre": "42"}}
    del described_share["jobQueueArn"]  # the share's ARN still names its job queue

    design = import_design(
        [("described.json", DESCRIBED), ("shares.json", LISTED_SHARES), ("qs2.json", described_share)]
    )

    assert [share.quota_share_name for share in design.config.job_queues[0].quota_shares] == [
        "qs1",
        "qs2",
        "qs3",
    ]


def test_a_create_body_and_the_answer_for_the_same_job_queue_are_read_once() -> None:
    body = {key: DESCRIBED["jobQueues"][0][key] for key in ("jobQueueName", "priority", "jobQueueType")}
    body |= {
        "schedulingPolicyArn": "quota",
        "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "ml-g5"}],
    }
    body |= {"state": "ENABLED"}

    design = import_design(
        [("described.json", DESCRIBED), ("shares.json", LISTED_SHARES), ("queue.json", body)]
    )

    assert [queue.job_queue_name for queue in design.config.job_queues] == ["gpu-training"]


def test_an_answer_field_newer_than_botocores_model_is_ignored_and_said() -> None:
    newer = copy.deepcopy(LISTED_SHARES)
    newer["quotaShares"][0]["lastUpdatedAt"] = 1764547200000

    design = import_design([("described.json", DESCRIBED), ("shares.json", newer)])

    assert ("shares.json:quotaShares[0].lastUpdatedAt") in [note.path for note in design.notes]


# --- refusals: each at its path, with the fix --------------------------------------------------------


def described(**changes: Any) -> dict[str, Any]:
    """DESCRIBED with ``changes`` applied to its job queue (None removes a key)."""
    document = copy.deepcopy(DESCRIBED)
    queue = document["jobQueues"][0]
    for key, value in changes.items():
        if value is None:
            queue.pop(key, None)
        else:
            queue[key] = value
    return document


@pytest.mark.parametrize(
    ("documents", "path", "fix"),
    [
        pytest.param(
            [
                (
                    "share.json",
                    {
                        **export_design(
                            parse_quota_config(
                                queue_file([("ml.g5.xlarge", 1)], [share("a", ("ml.g5.xlarge", 1))]), "q"
                            )
                        )["quotaShares"][0],
                        "priority": 5,
                    },
                )
            ],
            "priority",
            "priority is not a field of CreateQuotaShareRequest: remove it",
            id="create_body_with_a_field_aws_does_not_take",
        ),
        pytest.param(
            [
                (
                    "share.json",
                    {
                        "quotaShareName": "qs",
                        "jobQueue": "q",
                        "capacityLimits": [],
                        "resourceSharingConfiguration": {"strategy": "LEND"},
                    },
                )
            ],
            "preemptionConfiguration",
            "preemptionConfiguration is missing and CreateQuotaShareRequest requires it: add "
            "preemptionConfiguration",
            id="create_quota_share_without_preemption_configuration",
        ),
        pytest.param(
            [("d.json", described(jobQueueType="ECS")), ("s.json", LISTED_SHARES)],
            "d.json:jobQueues[0].jobQueueType",
            "set jobQueueType: SAGEMAKER_TRAINING",
            id="container_job_queue",
        ),
        pytest.param(
            [("d.json", described(serviceEnvironmentOrder=None)), ("s.json", LISTED_SHARES)],
            "d.json:jobQueues[0].serviceEnvironmentOrder",
            "add serviceEnvironmentOrder",
            id="job_queue_without_service_environment",
        ),
        pytest.param(
            [
                (
                    "d.json",
                    described(
                        serviceEnvironmentOrder=[
                            {"order": 1, "serviceEnvironment": "a"},
                            {"order": 2, "serviceEnvironment": "b"},
                        ]
                    ),
                ),
                ("s.json", LISTED_SHARES),
            ],
            "d.json:jobQueues[0].serviceEnvironmentOrder",
            "keep one service environment per job queue",
            id="two_service_environments",
        ),
        pytest.param(
            [
                ("d.json", described(serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": "other"}])),
                ("s.json", LISTED_SHARES),
            ],
            "d.json:jobQueues[0].serviceEnvironmentOrder[0].serviceEnvironment",
            "service environment other is not among the documents: add its CreateServiceEnvironment body",
            id="unknown_service_environment",
        ),
        pytest.param(
            [("d.json", described(schedulingPolicyArn=None)), ("s.json", LISTED_SHARES)],
            "d.json:jobQueues[0].schedulingPolicyArn",
            "set schedulingPolicyArn",
            id="fifo_job_queue_with_quota_shares",
        ),
        pytest.param(
            [("d.json", DESCRIBED)],
            "jobQueues[0]",
            "aws batch list-quota-shares --job-queue gpu-training",
            id="job_queue_without_its_shares",
        ),
        pytest.param(
            [("s.json", LISTED_SHARES)],
            "quotaShares[0].jobQueueArn",
            "job queue gpu-training is not among the documents: add its CreateJobQueue body",
            id="shares_without_their_job_queue",
        ),
        pytest.param(
            [
                (
                    "d.json",
                    {
                        **DESCRIBED,
                        "schedulingPolicies": [
                            {"name": "quota", "arn": f"{ARN}:scheduling-policy/quota", "fairsharePolicy": {}}
                        ],
                    },
                ),
                ("s.json", LISTED_SHARES),
            ],
            "d.json:schedulingPolicies[0].quotaSharePolicy",
            "give it quotaSharePolicy {idleResourceAssignmentStrategy: FIFO} only",
            id="fair_share_policy",
        ),
        pytest.param(
            [
                ("d.json", DESCRIBED),
                ("s.json", LISTED_SHARES),
                ("s2.json", {**LISTED_SHARES["quotaShares"][0], "state": "DISABLED"}),
            ],
            "s2.json",
            "quotaShareName qs1 is also at s.json:quotaShares[0] with other values: keep one of them",
            id="one_share_twice_with_other_values",
        ),
        pytest.param(
            [
                ("d.json", DESCRIBED),
                (
                    "s.json",
                    {
                        "quotaShares": [
                            {
                                **LISTED_SHARES["quotaShares"][2],
                                "resourceSharingConfiguration": {"strategy": "RESERVE", "borrowLimit": 5},
                            }
                        ]
                    },
                ),
            ],
            "s.json:quotaShares[0].resourceSharingConfiguration.borrowLimit",
            "remove borrowLimit or set strategy: LEND_AND_BORROW",
            id="our_rules_at_the_aws_documents_path",
        ),
        pytest.param(
            [
                ("d.json", DESCRIBED),
                (
                    "s.json",
                    {
                        "quotaShares": [
                            {
                                **LISTED_SHARES["quotaShares"][0],
                                "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 4}],
                            }
                        ]
                    },
                ),
            ],
            "d.json:serviceEnvironments[0].capacityLimits",
            "more than the job queue's capacity of 3 ml.g5.xlarge",
            id="shares_over_the_service_environments_capacity",
        ),
        pytest.param(
            [("x.json", {"computeEnvironments": []})],
            "",
            "this is not an AWS Batch document we read",
            id="not_a_document_we_read",
        ),
    ],
)
def test_a_design_our_file_cannot_hold_is_refused_at_the_field_with_the_fix(
    documents: list[tuple[str, dict[str, Any]]], path: str, fix: str
) -> None:
    with pytest.raises(QuotaConfigError) as raised:
        import_design(documents)

    assert [issue for issue in raised.value.issues if issue.path == path and fix in issue.message], (
        raised.value
    )


# --- documents generated from the service model -----------------------------------------------------


def test_every_generated_document_imports_or_fails_at_a_path_with_the_fix() -> None:
    fixes = ("add ", "remove ", "set ", "give ", "keep ", "lower ", "leave ", "it must be ")
    accepted_bases = 0
    for design in generated_designs():
        try:
            imported = import_design(design.documents)
        except QuotaConfigError as error:
            assert not design.label.endswith(", base"), (design.label, error)
            for issue in error.issues:
                assert issue.path, (design.label, issue)
                assert any(fix in issue.message for fix in fixes), (design.label, issue)
        else:
            assert botocore_errors(export_design(imported.config)) == []
            accepted_bases += design.label.endswith(", base")
    assert accepted_bases == 9  # the four request bodies and the five answers


def test_generated_documents_figures() -> None:
    generated, accepted, refusals = import_figures()

    assert generated >= 200
    assert 0 < accepted < generated
    assert all(reason.split(": ", 1)[1] for reason in refusals)


# --- what AWS Batch treats differently -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "warnings"),
    [
        pytest.param(queue_file([("ml.g5.xlarge", 2)], [share("a", ("ml.g5.xlarge", 2))]), [], id="portable"),
        pytest.param(
            queue_file([("ml.g5.xlarge", 0)], [share("a", ("ml.g5.xlarge", 0))]),
            [
                ("jobQueues[0].capacityLimits[0].maxCapacity", "maxCapacity 0: here the service environment"),
                (
                    "jobQueues[0].quotaShares[0].capacityLimits[0].maxCapacity",
                    "maxCapacity 0: here a quota share",
                ),
            ],
            id="max_capacity_0",
        ),
        pytest.param(
            queue_file([("local-gpu", 2)], [share("a", ("local-gpu", 2))]),
            [("jobQueues[0].capacityLimits[0].capacityUnit", "local-gpu is the Airflow worker's own GPUs")],
            id="local_unit",
        ),
        pytest.param(
            queue_file(
                [("ml.g5.xlarge", 2)], [{**share("a", ("ml.g5.xlarge", 2)), "preemptionConfiguration": None}]
            ),
            [
                (
                    "jobQueues[0].quotaShares[0].preemptionConfiguration",
                    "AWS Batch's CreateQuotaShare requires it",
                )
            ],
            id="missing_preemption_configuration",
        ),
        pytest.param(
            queue_file([("ml.g5.xlarge", 21)], [share(f"s{i}", ("ml.g5.xlarge", 1)) for i in range(21)]),
            [("jobQueues[0].quotaShares", "AWS Batch allows at most 20 per job queue")],
            id="21_shares",
        ),
        pytest.param(
            queue_file(
                [(f"ml.u{i}", 1) for i in range(6)], [share("a", *[(f"ml.u{i}", 1) for i in range(6)])]
            ),
            [("jobQueues[0].quotaShares[0].capacityLimits", "AWS Batch allows at most 5 per quota share")],
            id="6_capacity_limits",
        ),
    ],
)
def test_validate_warns_about_what_aws_batch_treats_differently(
    raw: dict[str, Any], warnings: list[tuple[str, str]]
) -> None:
    for queue in raw["jobQueues"]:
        for each in queue["quotaShares"]:
            if each.get("preemptionConfiguration", {}) is None:
                del each["preemptionConfiguration"]

    found = portability_warnings(parse_quota_config(raw, "quotas.yaml"))

    assert [
        (
            issue.path,
            next((text for path, text in warnings if path == issue.path and text in issue.message), None),
        )
        for issue in found
    ] == warnings


@pytest.mark.parametrize(
    ("document", "is_aws"),
    [
        pytest.param(queue_file([("gpu", 1)], [share("a", ("gpu", 1))]), False, id="quota_file"),
        pytest.param(
            {"jobQueues": [{"jobQueueName": "q", "capacityLimits": []}]},
            False,
            id="quota_file_missing_shares",
        ),
        pytest.param({"jobQueues": DESCRIBED["jobQueues"]}, True, id="describe_job_queues"),
        pytest.param(LISTED_SHARES, True, id="list_quota_shares"),
        pytest.param({"quotaShareName": "a", "jobQueue": "q"}, True, id="create_quota_share"),
    ],
)
def test_a_quota_file_is_told_from_aws_documents(document: dict[str, Any], is_aws: bool) -> None:
    assert is_aws_document(document) is is_aws
