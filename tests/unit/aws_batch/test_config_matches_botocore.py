"""The quota file's models (``engine/config.py``) against the installed botocore ``batch`` model.

The engine keeps its own pydantic models of AWS's shapes: it runs without botocore (on a GPU machine, in
the simulator) and its models carry our rules and messages. These tests make sure they stay AWS's shapes:
every field we read under an AWS name is a member of the botocore shape it copies, every enum has AWS's
values, and AWS's required members are either required here or listed below with the reason they are not.
A newer botocore that adds a strategy, renames a member or requires a new one fails here first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, get_args, get_origin

import pytest
from botocore.model import Shape, StructureShape
from pydantic import BaseModel

from airflow_quota.aws_batch.botocore_model import batch_model
from airflow_quota.engine.config import (
    CapacityLimit,
    JobSubmissionConfig,
    PreemptionConfiguration,
    QuotaShareConfig,
    ResourceSharingConfiguration,
)


@dataclass(frozen=True)
class Copy:
    """One of our models and the botocore shape it copies, with the differences we mean to have."""

    model: type[BaseModel]
    operation: str
    #: Member path inside the operation's input, e.g. ("capacityLimits", "member").
    path: tuple[str, ...] = ()
    #: Our fields AWS's shape does not have here, and why.
    ours_only: dict[str, str] = field(default_factory=dict)
    #: AWS's members the model leaves out, and why.
    left_out: dict[str, str] = field(default_factory=dict)
    #: AWS's required members that are optional here, and why.
    optional_here: dict[str, str] = field(default_factory=dict)


COPIES = {
    "a quota share is CreateQuotaShare's body": Copy(
        QuotaShareConfig,
        "CreateQuotaShare",
        left_out={
            "jobQueue": "the file lists a queue's shares under the queue",
            "tags": "tags are AWS's bookkeeping; import keeps them out and says so",
        },
        optional_here={
            "preemptionConfiguration": "absent means DISABLED; validate warns that AWS requires it",
        },
        ours_only={
            "extensions": "our opt-in extensions (docs/extensions.md): export leaves them out with a note",
        },
    ),
    "a capacity limit is QuotaShareCapacityLimit": Copy(
        CapacityLimit, "CreateQuotaShare", ("capacityLimits", "member")
    ),
    "resource sharing is QuotaShareResourceSharingConfiguration": Copy(
        ResourceSharingConfiguration, "CreateQuotaShare", ("resourceSharingConfiguration",)
    ),
    "preemption is QuotaSharePreemptionConfiguration": Copy(
        PreemptionConfiguration,
        "CreateQuotaShare",
        ("preemptionConfiguration",),
        optional_here={"inSharePreemption": "absent means DISABLED, as in a share without the block"},
    ),
    "a job request is SubmitServiceJob's body": Copy(
        JobSubmissionConfig,
        "SubmitServiceJob",
        ours_only={
            "capacityUnit": "AWS reads it from serviceRequestPayload's ResourceConfig.InstanceType",
            "instanceCount": "AWS reads it from serviceRequestPayload's ResourceConfig.InstanceCount",
            "preemptionRetriesBeforeTermination": "AWS nests it in preemptionConfiguration",
        },
        left_out={
            "serviceRequestPayload": "the operator builds it; quotas do not look at it",
            "serviceJobType": "always SAGEMAKER_TRAINING",
            "retryStrategy": "Airflow's task retries",
            "shareIdentifier": "fair-share scheduling, not quota shares",
            "preemptionConfiguration": "flattened to preemptionRetriesBeforeTermination",
            "timeoutConfig": "the operator's attempt_timeout",
            "tags": "the operator's tags",
            "clientToken": "the operator derives it from the task instance",
        },
    ),
}


def aws_shape(copy: Copy) -> StructureShape:
    shape: Any = batch_model().operation_model(copy.operation).input_shape
    for step in copy.path:
        shape = shape.member if step == "member" else shape.members[step]
    assert isinstance(shape, StructureShape), f"{copy.operation}{copy.path} is not a structure"
    return shape


def our_fields(model: type[BaseModel]) -> dict[str, Any]:
    """Our model's fields by the AWS name they are read under."""
    return {info.alias or name: info for name, info in model.model_fields.items()}


def enum_values(annotation: Any) -> set[str] | None:
    """The values a field accepts when it is an enum or a Literal (through Optional), else None."""
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return {member.value for member in annotation}
    if get_origin(annotation) is Literal:
        return set(get_args(annotation))
    for argument in get_args(annotation):
        values = enum_values(argument)
        if values is not None:
            return values
    return None


@pytest.mark.parametrize("copy", COPIES.values(), ids=COPIES.keys())
def test_every_field_read_under_an_aws_name_is_a_member_of_the_shape_it_copies(copy: Copy) -> None:
    members = set(aws_shape(copy).members)
    invented = set(our_fields(copy.model)) - members - set(copy.ours_only)
    assert not invented, f"{copy.model.__name__} reads {sorted(invented)}, which AWS's shape does not have"
    still_ours = set(copy.ours_only) & members
    assert not still_ours, f"AWS's shape now has {sorted(still_ours)}: read it as AWS does"


@pytest.mark.parametrize("copy", COPIES.values(), ids=COPIES.keys())
def test_every_aws_member_is_read_or_left_out_for_a_reason(copy: Copy) -> None:
    unread = set(aws_shape(copy).members) - set(our_fields(copy.model)) - set(copy.left_out)
    assert not unread, f"AWS's {aws_shape(copy).name} has {sorted(unread)}: read it or say why not"


@pytest.mark.parametrize("copy", COPIES.values(), ids=COPIES.keys())
def test_what_aws_requires_is_required_here_unless_a_default_is_documented(copy: Copy) -> None:
    shape = aws_shape(copy)
    fields = our_fields(copy.model)
    optional = {
        name
        for name in shape.required_members
        if name in fields and not fields[name].is_required() and name not in copy.optional_here
    }
    assert not optional, f"AWS requires {sorted(optional)} in {shape.name}; {copy.model.__name__} does not"


@pytest.mark.parametrize("copy", COPIES.values(), ids=COPIES.keys())
def test_enums_have_exactly_aws_values(copy: Copy) -> None:
    shape = aws_shape(copy)
    for name, info in our_fields(copy.model).items():
        member: Shape | None = shape.members.get(name)
        ours = enum_values(info.annotation)
        if member is None or ours is None:
            continue
        assert ours == set(member.enum), f"{shape.name}.{name}: ours {sorted(ours)}, AWS {member.enum}"


def test_the_table_checks_every_enum_aws_has_in_a_quota_share() -> None:
    """Guards the table above: the share's three enums are compared, not skipped as unmatched."""
    compared = [
        (copy.model.__name__, name)
        for copy in COPIES.values()
        for name, info in our_fields(copy.model).items()
        if name in aws_shape(copy).members and enum_values(info.annotation) is not None
    ]
    assert {("QuotaShareConfig", "state"), ("ResourceSharingConfiguration", "strategy")} <= set(compared)
    assert ("PreemptionConfiguration", "inSharePreemption") in compared
