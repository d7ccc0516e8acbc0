"""Read a quota file (YAML or JSON) from disk and validate it: only a reader, so a bad file changes nothing.

``.json`` files are read as JSON; everything else as YAML (a superset of JSON). Unreadable files, syntax
errors (with their line), duplicate keys and a top level that is not a mapping raise ``QuotaConfigError``
like any other problem, so callers handle one exception.
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from airflow_quota.engine.config import ConfigIssue, QuotaConfig, QuotaConfigError, parse_quota_config


def load_quota_file(path: str | os.PathLike[str]) -> QuotaConfig:
    """Read and validate a quota file; raise ``QuotaConfigError`` listing every problem."""
    return parse_quota_config(read_mapping_file(path), str(path))


def read_mapping_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping at the top of a YAML or JSON file (also used for simulator scenario files)."""
    source = str(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _file_error(source, f"cannot read the file: {_reason(error)}") from error
    document = (
        _parse_json(text, source) if Path(path).suffix.lower() == ".json" else _parse_yaml(text, source)
    )
    if document is None:
        raise _file_error(source, "the file is empty: it must hold a mapping (key: value pairs)")
    if not isinstance(document, dict):
        kind = "a list" if isinstance(document, list) else f"a single value ({document!r})"
        raise _file_error(source, f"the top level is {kind}: it must be a mapping (key: value pairs)")
    return document


def _parse_yaml(text: str, source: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictSafeLoader)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "invalid YAML"
        raise _file_error(source, f"YAML syntax error{where}: {problem}; fix it there") from error
    except yaml.YAMLError as error:
        raise _file_error(source, f"YAML syntax error: {error}; fix the file") from error


def _parse_json(text: str, source: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_json_object_without_duplicates)
    except json.JSONDecodeError as error:
        raise _file_error(
            source,
            f"JSON syntax error at line {error.lineno}, column {error.colno}: {error.msg}; fix it there",
        ) from error
    except _DuplicateKeyError as error:
        raise _file_error(source, str(error)) from error


class _DuplicateKeyError(ValueError):
    pass


def _json_object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise _DuplicateKeyError(f"key {key!r} appears twice in one JSON object: keep only one")
        mapping[key] = value
    return mapping


class _StrictSafeLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error, not an overwrite."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader itself refuses unhashable keys, with its own message
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"key {key!r} appears twice in this mapping: keep only one",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _file_error(source: str, message: str) -> QuotaConfigError:
    return QuotaConfigError(source, [ConfigIssue("", message)])


def _reason(error: Exception) -> str:
    if isinstance(error, OSError):
        return error.strerror or str(error)
    return f"it is not UTF-8 text ({error})"
