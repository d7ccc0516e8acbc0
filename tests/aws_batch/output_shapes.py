"""Check an AWS Batch answer against the installed botocore's OUTPUT shape for its operation.

botocore validates requests (``ParamValidator``), never answers; this walks an operation's output shape
and reports, by path, what a real client would trip over: a required member missing, a member the
model does not have, a value of the wrong JSON type, a string outside its enum. Shapes come from the
installed model (``airflow_quota.aws_batch.botocore_model.batch_model``), never copied by hand.
"""

from __future__ import annotations

from typing import Any

from botocore.model import ListShape, MapShape, Shape, StructureShape

from airflow_quota.aws_batch.botocore_model import batch_model


def answer_problems(operation: str, answer: object) -> list[str]:
    """Every way ``answer`` (the parsed JSON body) departs from ``operation``'s output shape."""
    shape = batch_model().operation_model(operation).output_shape
    if shape is None:
        return [] if answer in ({}, None, "") else [f"{operation} answers nothing, got {answer!r}"]
    return _problems(answer, shape, operation)


def _problems(value: object, shape: Shape, path: str) -> list[str]:
    kind = shape.type_name
    if kind == "structure":
        assert isinstance(shape, StructureShape)
        if not isinstance(value, dict):
            return [f"{path}: {value!r} is not an object ({shape.name})"]
        problems = [
            f"{path}.{name}: required by {shape.name} but missing"
            for name in shape.required_members
            if name not in value
        ]
        for name, member_value in value.items():
            member = shape.members.get(name)
            if member is None:
                problems.append(f"{path}.{name}: not a member of {shape.name}")
            else:
                problems += _problems(member_value, member, f"{path}.{name}")
        return problems
    if kind == "list":
        assert isinstance(shape, ListShape)
        if not isinstance(value, list):
            return [f"{path}: {value!r} is not a list ({shape.name})"]
        return [
            problem
            for i, item in enumerate(value)
            for problem in _problems(item, shape.member, f"{path}[{i}]")
        ]
    if kind == "map":
        assert isinstance(shape, MapShape)
        if not isinstance(value, dict):
            return [f"{path}: {value!r} is not an object ({shape.name})"]
        problems = []
        for key, item in value.items():
            problems += _problems(key, shape.key, f"{path} key {key!r}")
            problems += _problems(item, shape.value, f"{path}[{key!r}]")
        return problems
    return _scalar_problems(value, shape, path)


def _scalar_problems(value: Any, shape: Shape, path: str) -> list[str]:
    kind = shape.type_name
    expected: tuple[type, ...] = {
        "string": (str,),
        "integer": (int,),
        "long": (int,),
        "double": (int, float),
        "float": (int, float),
        "boolean": (bool,),
        "timestamp": (int, float),
    }.get(kind, (object,))
    if not isinstance(value, expected) or (kind != "boolean" and isinstance(value, bool)):
        return [f"{path}: {value!r} is not a {kind} ({shape.name})"]
    enum = getattr(shape, "enum", None)  # only string shapes (botocore's StringShape) have one
    if enum and value not in enum:
        return [f"{path}: {value!r} is not one of {shape.name}'s values {enum}"]
    return []
