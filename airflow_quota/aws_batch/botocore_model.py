"""The installed botocore's ``batch`` service model and its parameter validator, in our issue format.

Every AWS shape we read or write is botocore's own: nothing here copies a shape. ``shape_issues`` runs
``botocore.validate.ParamValidator`` on a document and turns each of its errors into a ``ConfigIssue`` at the
field's path, with the fix.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

import botocore.session
from botocore.model import ServiceModel, Shape, StructureShape
from botocore.validate import ParamValidator

from airflow_quota.engine.config import ConfigIssue
from airflow_quota.engine.messages import join_path, show_value

#: The four kinds of resource a design spreads over, by the key that lists them in an export.
Kind = Literal["serviceEnvironments", "schedulingPolicies", "jobQueues", "quotaShares"]
KINDS: tuple[Kind, ...] = ("serviceEnvironments", "schedulingPolicies", "jobQueues", "quotaShares")

#: The operation whose request body creates each kind.
CREATE_OPERATION: dict[Kind, str] = {
    "serviceEnvironments": "CreateServiceEnvironment",
    "schedulingPolicies": "CreateSchedulingPolicy",
    "jobQueues": "CreateJobQueue",
    "quotaShares": "CreateQuotaShare",
}


@cache
def batch_model() -> ServiceModel:
    return botocore.session.get_session().get_service_model("batch")


def request_shape(kind: Kind) -> StructureShape:
    shape = batch_model().operation_model(CREATE_OPERATION[kind]).input_shape
    assert shape is not None
    return shape


def answer_shape(kind: Kind) -> StructureShape:
    """The shape of one resource in AWS's answers (Describe*, or DescribeQuotaShare for a quota share,
    whose answer is ListQuotaShares' item plus ``tags``)."""
    model = batch_model()
    if kind == "quotaShares":
        output = model.operation_model("DescribeQuotaShare").output_shape
        assert output is not None
        return output
    operation = {
        "serviceEnvironments": "DescribeServiceEnvironments",
        "schedulingPolicies": "DescribeSchedulingPolicies",
        "jobQueues": "DescribeJobQueues",
    }[kind]
    output = model.operation_model(operation).output_shape
    assert output is not None
    member: Any = output.members[kind]
    return member.member


def shape_issues(document: object, shape: Shape, path: str, *, answer: bool) -> list[ConfigIssue]:
    """botocore's parameter validation of ``document`` as ``shape``, each error at its path with the fix.

    In an answer (``answer=True``) a key the installed model does not know is not an error (a newer API
    may add fields); the caller reports it as ignored.
    """
    report = ParamValidator().validate(document, shape)
    issues: list[ConfigIssue] = []
    # botocore keeps its errors as (type, dotted name, details) tuples; its report is only text.
    for error_type, name, details in report._errors:
        where = join_path(path, name.lstrip("."))
        if error_type == "missing required field":
            missing = details["required_name"]
            issues.append(
                ConfigIssue(
                    join_path(where, missing),
                    f"{missing} is missing and {shape.name} requires it: add {missing}",
                )
            )
        elif error_type == "unknown field":
            if answer:
                continue
            allowed = ", ".join(details["valid_names"])
            issues.append(
                ConfigIssue(
                    join_path(where, details["unknown_param"]),
                    f"{details['unknown_param']} is not a field of {shape.name}: remove it "
                    f"(its fields: {allowed})",
                )
            )
        elif error_type == "invalid type":
            kinds = ", ".join(t.removeprefix("<class '").removesuffix("'>") for t in details["valid_types"])
            issues.append(
                ConfigIssue(where, f"{show_value(details['param'])} has the wrong type: give a {kinds}")
            )
        else:
            issues.append(ConfigIssue(where, f"{report._format_error((error_type, name, details))}: fix it"))
    return issues


def unknown_answer_keys(document: object, shape: Shape, path: str) -> list[str]:
    """Paths of keys in an answer that the installed model's ``shape`` does not have (ignored on import)."""
    report = ParamValidator().validate(document, shape)
    return [
        join_path(join_path(path, name.lstrip(".")), details["unknown_param"])
        for error_type, name, details in report._errors
        if error_type == "unknown field"
    ]
