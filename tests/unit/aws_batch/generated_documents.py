"""Documents generated from the installed botocore ``batch`` model, for the import's robustness tests.

``variants(shape)`` walks a shape and fills it: every member (and, apart, only the required ones), then one
document per other value of each enum and per boundary integer (0 and -1: the model gives no min or max for
these integers). Strings are one name (``gpu-1``) so references between documents resolve; ARN members are
ARNs of that name; ``capacityUnit`` is an instance type. ``generated_designs()`` sets each variant among
companion request bodies (our export of a one-share design of the same names), as a request body or as
the answer of each Describe/List operation.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore.model import Shape

from airflow_quota.aws_batch.botocore_model import KINDS, Kind, batch_model, request_shape
from airflow_quota.aws_batch.export import export_design
from airflow_quota.engine.config import parse_quota_config

NAME = "gpu-1"
UNIT = "ml.g5.xlarge"
_ARN = "arn:aws:batch:us-east-1:123456789012"
_ARN_OF = {
    "serviceEnvironmentArn": f"{_ARN}:service-environment/{NAME}",
    "jobQueueArn": f"{_ARN}:job-queue/{NAME}",
    "schedulingPolicyArn": f"{_ARN}:scheduling-policy/{NAME}",
    "arn": f"{_ARN}:scheduling-policy/{NAME}",
    "quotaShareArn": f"{_ARN}:job-queue/{NAME}/quota-share/{NAME}",
}
#: The answers that describe each kind: (operation, the output member listing them, or None for the
#: operation's whole answer).
ANSWERS: dict[Kind, list[tuple[str, str | None]]] = {
    "serviceEnvironments": [("DescribeServiceEnvironments", "serviceEnvironments")],
    "schedulingPolicies": [("DescribeSchedulingPolicies", "schedulingPolicies")],
    "jobQueues": [("DescribeJobQueues", "jobQueues")],
    "quotaShares": [("ListQuotaShares", "quotaShares"), ("DescribeQuotaShare", None)],
}


def fill(
    shape: Shape, member_name: str = "", *, required_only: bool = False, overrides: dict[str, Any]
) -> Any:
    """A value of ``shape``; ``overrides`` maps a dotted member path to the value to put there."""
    return _fill(shape, member_name, "", required_only, overrides)


def _fill(shape: Shape, member_name: str, path: str, required_only: bool, overrides: dict[str, Any]) -> Any:
    if path in overrides:
        return overrides[path]
    kind = shape.type_name
    if kind == "structure":
        members: Any = shape.members  # type: ignore[attr-defined]
        required = set(shape.required_members)  # type: ignore[attr-defined]
        return {
            name: _fill(member, name, f"{path}.{name}".lstrip("."), required_only, overrides)
            for name, member in members.items()
            if not required_only or name in required or _overridden(f"{path}.{name}".lstrip("."), overrides)
        }
    if kind == "list":
        member = shape.member  # type: ignore[attr-defined]
        return [_fill(member, member_name, f"{path}[]", required_only, overrides)]
    if kind == "map":
        return {"team": "research"}
    if kind == "string":
        if shape.enum:  # type: ignore[attr-defined]
            return shape.enum[0]  # type: ignore[attr-defined]
        if member_name in _ARN_OF:
            return _ARN_OF[member_name]
        return UNIT if member_name == "capacityUnit" else NAME
    if kind in ("integer", "long"):
        return 1
    if kind in ("float", "double"):
        return 1.0
    if kind == "boolean":
        return True
    raise AssertionError(f"no filler for {kind} ({shape.name})")


def _overridden(path: str, overrides: dict[str, Any]) -> bool:
    return any(key == path or key.startswith((f"{path}.", f"{path}[")) for key in overrides)


def variants(shape: Shape, base: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(what was varied, document) for every variant of ``shape``: all members filled; the required ones
    only; ``base`` (a working document); and ``base`` with one member changed: each enum value, 1, 0 and -1
    for an integer, the filler for a string, float or map, and an empty list for a list."""
    yield "all members", fill(shape, overrides={})
    yield "required members only", fill(shape, required_only=True, overrides={})
    yield "base", copy.deepcopy(base)
    for path, leaf in _paths(shape):
        values: list[Any] = []
        if leaf.type_name == "string" and leaf.enum:  # type: ignore[attr-defined]
            values = list(leaf.enum)  # type: ignore[attr-defined]
        elif leaf.type_name == "integer":
            values = [1, 0, -1]
        elif leaf.type_name == "list":
            values = [[]]
        elif leaf.type_name in ("string", "map", "float"):
            values = [_fill(leaf, path.rsplit(".", 1)[-1].removesuffix("[]"), "", False, {})]
        for value in values:
            document = copy.deepcopy(base)
            _put(document, shape, path.replace("[]", ".[]").split("."), value)
            yield f"{path}={value}", document


def _paths(shape: Shape, path: str = "") -> Iterator[tuple[str, Shape]]:
    """Every member path below ``shape`` with its shape (``[]`` stands for a list's first item)."""
    if shape.type_name == "structure":
        for name, member in shape.members.items():  # type: ignore[attr-defined]
            member_path = f"{path}.{name}".lstrip(".")
            if member.type_name != "structure":
                yield member_path, member
            yield from _paths(member, member_path)
    elif shape.type_name == "list":
        yield from _paths(shape.member, f"{path}[]")  # type: ignore[attr-defined]


def _put(container: Any, shape: Shape, parts: list[str], value: Any) -> None:
    """Set the member at ``parts`` to ``value``, filling in the required members of what is missing."""
    head, rest = parts[0], parts[1:]
    if head == "[]":
        member = shape.member  # type: ignore[attr-defined]
        if not container:
            container.append(fill(member, required_only=True, overrides={}))
        if rest:
            _put(container[0], member, rest, value)
        else:
            container[0] = value
        return
    member = shape.members[head]  # type: ignore[attr-defined]
    if not rest:
        container[head] = value
        return
    if not container.get(head):
        container[head] = [] if member.type_name == "list" else fill(member, required_only=True, overrides={})
    _put(container[head], member, rest, value)


def answer_base(shape: Shape, body: dict[str, Any]) -> dict[str, Any]:
    """A working answer from a request body: its members the answer has, the answer's required members
    and its ARNs filled, and an empty list for a required list the body lacks (what AWS answers for a part
    the resource does not use, such as a SageMaker job queue's computeEnvironmentOrder)."""
    members: Any = shape.members  # type: ignore[attr-defined]
    answer = {key: copy.deepcopy(value) for key, value in body.items() if key in members}
    for name, member in members.items():
        if name in answer:
            continue
        if name in _ARN_OF:
            answer[name] = _ARN_OF[name]
        elif name in shape.required_members:  # type: ignore[attr-defined]
            answer[name] = [] if member.type_name == "list" else _fill(member, name, "", True, {})
    return answer


@dataclass(frozen=True)
class GeneratedDesign:
    """One generated document among companion request bodies: what it is, and the files to import."""

    label: str
    documents: list[tuple[str, dict[str, Any]]]


def companions() -> dict[Kind, dict[str, Any]]:
    """Request bodies (our export) of job queue ``gpu-1`` with one share ``gpu-1`` of 1 ``ml.g5.xlarge``."""
    limits = [{"capacityUnit": UNIT, "maxCapacity": 1}]
    share = {
        "quotaShareName": NAME,
        "capacityLimits": limits,
        "resourceSharingConfiguration": {"strategy": "RESERVE"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
    }
    config = parse_quota_config(
        {"jobQueues": [{"jobQueueName": NAME, "capacityLimits": limits, "quotaShares": [share]}]},
        "companions",
    )
    bundle = export_design(config, region="us-east-1", account_id="123456789012")
    return {kind: bundle[kind][0] for kind in KINDS}


def generated_designs() -> Iterator[GeneratedDesign]:
    model = batch_model()
    for kind in KINDS:
        forms: list[tuple[str, Shape, str | None]] = [
            (f"Create{_singular(kind)} request", request_shape(kind), None)
        ]
        for operation, member in ANSWERS[kind]:
            output: Any = model.operation_model(operation).output_shape
            item = output.members[member].member if member else output
            forms.append((f"{operation} answer", item, member))
        for form, shape, wrapper in forms:
            body = companions()[kind]
            base = body if wrapper is None and form.startswith("Create") else answer_base(shape, body)
            for varied, document in variants(shape, base):
                others = companions()
                files = [(f"{other}.json", body) for other, body in others.items() if other != kind]
                generated = {wrapper: [document]} if wrapper else document
                files.append((f"generated-{kind}.json", copy.deepcopy(generated)))
                yield GeneratedDesign(f"{form}, {varied}", files)


def _singular(kind: Kind) -> str:
    return {
        "serviceEnvironments": "ServiceEnvironment",
        "schedulingPolicies": "SchedulingPolicy",
        "jobQueues": "JobQueue",
        "quotaShares": "QuotaShare",
    }[kind]


def import_figures() -> tuple[int, int, dict[str, int]]:
    """(generated, accepted, count per distinct refusal: the path without file and indices, and message)."""
    import re
    from collections import Counter

    from airflow_quota.aws_batch.design import import_design
    from airflow_quota.engine.config import QuotaConfigError

    generated = accepted = 0
    reasons: Counter[str] = Counter()
    for design in generated_designs():
        generated += 1
        try:
            import_design(design.documents)
        except QuotaConfigError as error:
            for issue in error.issues:
                path = re.sub(r"\[\d+\]", "[i]", issue.path.split(":", 1)[-1])
                reasons[f"{path or '(document)'}: {issue.message}"] += 1
        else:
            accepted += 1
    return generated, accepted, dict(reasons)


if __name__ == "__main__":
    total, ok, refusals = import_figures()
    print(
        f"generated {total}, accepted {ok}, refused {total - ok}; {len(refusals)} distinct refusal reasons:"
    )
    for reason, count in sorted(refusals.items(), key=lambda item: -item[1]):
        print(f"{count:4} {reason}")
