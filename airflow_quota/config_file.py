"""Read a quota file (YAML or JSON) from disk and validate it: only a reader, so a bad file changes nothing.

``load_quota_design`` also takes AWS Batch documents in its place (``airflow_quota.aws_batch.design``).

``.json`` files are read as JSON; everything else as YAML (a superset of JSON). Unreadable files, syntax
errors (with their line), duplicate keys and a top level that is not a mapping raise ``QuotaConfigError``
like any other problem, so callers handle one exception. So does a document no quota file needs and no
reader should spend itself on: more than ``MAX_FILE_BYTES`` (reading stops there), nested more than
``MAX_DEPTH`` levels, or more than ``MAX_VALUES`` values once YAML aliases are expanded. A number of
more than ``MAX_NUMBER_DIGITS`` digits is read as ``TooManyDigits``, which validation then refuses at its
path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from airflow_quota.engine.config import ConfigIssue, QuotaConfig, QuotaConfigError, parse_quota_config
from airflow_quota.engine.messages import TooManyDigits

if TYPE_CHECKING:
    from airflow_quota.aws_batch.design import QuotaDesign

#: A quota file nests 6 levels, a scenario 5: far deeper is a mistake (and would exhaust Python's stack).
MAX_DEPTH = 100
#: Values in the document, each alias counted every time it is used (a few alias levels can mean billions).
MAX_VALUES = 1_000_000
#: No field needs a number this long (Python itself refuses to convert more than 4,300 digits).
MAX_NUMBER_DIGITS = 100
#: The most a document read takes: a quota file needs a few KiB, a scenario or AWS Batch's answers for a
#: large design a few MiB. Reading stops there, so a device or an endless stream (``/dev/zero``) is refused
#: in a line instead of filling the memory.
MAX_FILE_BYTES = 16 * 2**20


def load_quota_file(path: str | os.PathLike[str]) -> QuotaConfig:
    """Read and validate a quota file; raise ``QuotaConfigError`` listing every problem."""
    return parse_quota_config(read_mapping_file(path), str(path))


def read_mapping_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping at the top of a YAML or JSON file (also used for simulator scenario files)."""
    source = str(path)
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise _file_error(
                source,
                f"the file holds more than {MAX_FILE_BYTES // 2**20} MiB: quota files, AWS Batch documents "
                "and scenarios need far less; give the file itself, not a device or a stream",
            )
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _file_error(source, f"cannot read the file: {_reason(error)}") from error
    document = (
        _parse_json(text, source) if Path(path).suffix.lower() == ".json" else _parse_yaml(text, source)
    )
    if document is None:
        raise _file_error(source, "the file is empty: it must hold a mapping (key: value pairs)")
    size_problem = _size_problem(document)
    if size_problem:
        raise _file_error(source, size_problem)
    if not isinstance(document, dict):
        kind = "a list" if isinstance(document, list) else f"a single value ({document!r})"
        raise _file_error(source, f"the top level is {kind}: it must be a mapping (key: value pairs)")
    return document


def _size_problem(document: object) -> str | None:
    """Why the document is too deep or too large to validate, if it is (counted without recursion)."""
    stack: list[tuple[object, int]] = [(document, 1)]
    values = 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if depth > MAX_DEPTH:
            return _too_deep()
        if values > MAX_VALUES:
            return (
                f"the document holds more than {MAX_VALUES:,} values (YAML aliases counted each time they "
                "are used): a quota file needs a few hundred; write the values out instead of nesting aliases"
            )
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)
    return None


def _too_deep(where: str = "") -> str:
    return (
        f"the document nests more than {MAX_DEPTH} levels deep{where}: quota and scenario files need 6 at "
        "most; fix its brackets"
    )


def _parse_yaml(text: str, source: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictSafeLoader)
    except _TooDeepError as error:
        raise _file_error(source, _too_deep(f" (at line {error.line})")) from error
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = error.problem or error.context or "invalid YAML"
        raise _file_error(source, f"YAML syntax error{where}: {problem}; fix it there") from error
    except yaml.YAMLError as error:
        raise _file_error(source, f"YAML syntax error: {error}; fix the file") from error


def _parse_json(text: str, source: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_json_object_without_duplicates, parse_int=_json_int)
    except RecursionError as error:  # deeper than Python's stack, before _size_problem can count it
        raise _file_error(source, _too_deep()) from error
    except json.JSONDecodeError as error:
        raise _file_error(
            source,
            f"JSON syntax error at line {error.lineno}, column {error.colno}: {error.msg}; fix it there",
        ) from error
    except _DuplicateKeyError as error:
        raise _file_error(source, str(error)) from error


class _DuplicateKeyError(ValueError):
    pass


def _json_int(text: str) -> int | TooManyDigits:
    digits = len(text.lstrip("-"))
    return TooManyDigits(digits) if digits > MAX_NUMBER_DIGITS else int(text)


def _json_object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise _DuplicateKeyError(f"key {key!r} appears twice in one JSON object: keep only one")
        mapping[key] = value
    return mapping


class _TooDeepError(yaml.YAMLError):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class _StrictSafeLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error, not an overwrite,
    nesting stops at ``MAX_DEPTH`` (PyYAML composes nodes recursively) and a number of more than
    ``MAX_NUMBER_DIGITS`` digits is read as ``TooManyDigits``."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeepError(self.peek_event().start_mark.line + 1)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_int_or_too_many_digits(self, node: yaml.ScalarNode) -> int | TooManyDigits:
        digits = len(str(node.value).replace("_", "").lstrip("+-"))
        if digits > MAX_NUMBER_DIGITS:
            return TooManyDigits(digits)
        return self.construct_yaml_int(node)

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


_StrictSafeLoader.add_constructor("tag:yaml.org,2002:int", _StrictSafeLoader.construct_int_or_too_many_digits)


def load_quota_design(paths: Sequence[str | os.PathLike[str]]) -> QuotaDesign:
    """Read a quota file, or AWS Batch documents (one or more files) imported into one; raise
    ``QuotaConfigError`` listing every problem, at its path in the file it is in."""
    from airflow_quota.aws_batch.design import QuotaDesign, import_design, is_aws_document

    documents = [(str(path), read_mapping_file(path)) for path in paths]
    quota_files = [name for name, document in documents if not is_aws_document(document)]
    if not quota_files:
        return import_design(documents)
    if len(documents) > 1:
        raise QuotaConfigError(
            ", ".join(name for name, _ in documents),
            [
                ConfigIssue(
                    name,
                    "a quota file is read on its own: give it alone, or give AWS Batch documents only "
                    "(airflow quota import turns them into a quota file)",
                )
                for name in quota_files
            ],
        )
    name, document = documents[0]
    return QuotaDesign(config=parse_quota_config(document, name), document=document)
