"""A local training job's request and files: what the local backend accepts, and where the job writes.

The request is a subset of SageMaker's CreateTrainingJob (``ResourceConfig`` with a ``local-`` capacity
unit, ``HyperParameters``, ``InputDataConfig`` channels on local directories, ``Environment``,
``StoppingCondition``), so hyperparameters and channels come from the same fields on both backends. Every
attempt and try of a task instance shares one directory, ``<root>/<dag>/<run>/<task>/<map index>``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from airflow_quota.backends.sagemaker import TaskIdentity, capacity_problems
from airflow_quota.ids import bounded_id
from airflow_quota.protocol import LOCAL_UNIT_PREFIX

#: The request fields the local backend reads; anything else is refused rather than ignored.
LOCAL_REQUEST_FIELDS = (
    "ResourceConfig",
    "HyperParameters",
    "InputDataConfig",
    "Environment",
    "StoppingCondition",
)
#: Where the per-task directories go when ``local_root_dir`` is not given: under AIRFLOW_HOME.
DEFAULT_ROOT_SUBDIR = "quota-training"

_UNSAFE_PATH_CHARACTERS = re.compile(r"[/\\\x00]")
#: A file name's limit on Linux and macOS.
MAX_PATH_PART_BYTES = 255


def local_request_problems(request: Mapping[str, Any]) -> list[str]:
    """Everything wrong with a local request, each problem on its own, before the job waits."""
    problems = [
        f"{key}: not used by the local backend, which reads only {', '.join(LOCAL_REQUEST_FIELDS)} "
        "(the entry point is the operator's entry_point)"
        for key in request
        if key not in LOCAL_REQUEST_FIELDS
    ]
    problems += capacity_problems(request)
    resource = request.get("ResourceConfig")
    if isinstance(resource, Mapping):
        unit = resource.get("InstanceType")
        if isinstance(unit, str) and unit and not unit.startswith(LOCAL_UNIT_PREFIX):
            problems.append(
                f"ResourceConfig.InstanceType: {unit!r} is not a local capacity unit; the local backend "
                f"trains on the worker's GPUs, whose unit starts with {LOCAL_UNIT_PREFIX!r} (e.g. local-gpu)"
            )
        problems += [
            f"ResourceConfig.{key}: not used by the local backend (give InstanceType and InstanceCount)"
            for key in resource
            if key not in ("InstanceType", "InstanceCount")
        ]
    problems += _string_map_problems(request, "HyperParameters")
    problems += _string_map_problems(request, "Environment")
    problems += _channel_problems(request.get("InputDataConfig"))
    stopping = request.get("StoppingCondition")
    if stopping is not None:
        if not isinstance(stopping, Mapping):
            problems.append("StoppingCondition: must be a mapping such as {'MaxRuntimeInSeconds': 3600}")
        else:
            runtime = stopping.get("MaxRuntimeInSeconds")
            if not isinstance(runtime, int) or isinstance(runtime, bool) or runtime < 1:
                problems.append(
                    f"StoppingCondition.MaxRuntimeInSeconds: must be a whole number >= 1, got {runtime!r}"
                )
            problems += [
                f"StoppingCondition.{key}: not used by the local backend (give MaxRuntimeInSeconds)"
                for key in stopping
                if key != "MaxRuntimeInSeconds"
            ]
    return problems


def _string_map_problems(request: Mapping[str, Any], field: str) -> list[str]:
    value = request.get(field)
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [f"{field}: must be a mapping of names to strings, got {type(value).__name__}"]
    return [
        f"{field}.{name}: values must be strings (as on SageMaker), got {type(item).__name__}"
        for name, item in value.items()
        if not isinstance(item, str)
    ]


def _channel_problems(channels: Any) -> list[str]:
    if channels is None:
        return []
    if not isinstance(channels, list):
        return ["InputDataConfig: must be a list of channels"]
    problems: list[str] = []
    seen: set[str] = set()
    for index, channel in enumerate(channels):
        where = f"InputDataConfig[{index}]"
        if not isinstance(channel, Mapping):
            problems.append(f"{where}: must be a mapping with ChannelName and DataSource")
            continue
        name = channel.get("ChannelName")
        if not isinstance(name, str) or not name:
            problems.append(f"{where}.ChannelName: missing")
        elif name in seen:
            problems.append(f"{where}.ChannelName: {name!r} appears twice")
        else:
            seen.add(name)
        problems += [
            f"{where}.{key}: not used by the local backend (give ChannelName and DataSource)"
            for key in channel
            if key not in ("ChannelName", "DataSource")
        ]
        source = channel.get("DataSource")
        file_source = source.get("FileDataSource") if isinstance(source, Mapping) else None
        if not isinstance(file_source, Mapping):
            problems.append(
                f"{where}.DataSource: the local backend reads local directories; give "
                "{'FileDataSource': {'FileUri': 'file:///absolute/path'}} (S3 is not downloaded)"
            )
            continue
        uri = file_source.get("FileUri")
        path = _channel_path(uri) if isinstance(uri, str) else None
        if path is None:
            problems.append(
                f"{where}.DataSource.FileDataSource.FileUri: must be file:///absolute/path or an absolute "
                f"path, got {uri!r}"
            )
        elif not path.exists():
            problems.append(
                f"{where}.DataSource.FileDataSource.FileUri: {path} does not exist on this worker"
            )
    return problems


def _channel_path(uri: str) -> Path | None:
    """The local path of a ``FileUri`` (``file:///...`` or an absolute path); None when it is neither."""
    if uri.startswith("file://"):
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost"):
            return None
        uri = unquote(parsed.path)
    path = Path(uri)
    return path if path.is_absolute() else None


def channels_of(request: Mapping[str, Any]) -> dict[str, Path]:
    channels: dict[str, Path] = {}
    for channel in request.get("InputDataConfig") or []:
        path = _channel_path(str(channel["DataSource"]["FileDataSource"]["FileUri"]))
        assert path is not None  # validated
        channels[str(channel["ChannelName"])] = path
    return channels


def _path_part(value: str) -> str:
    """One path component from an id: separators escaped, ``.`` and ``..`` never a parent or self, and
    within a file name's 255 bytes (a longer one keeps its beginning and ends with ``~`` and a digest)."""
    part = _UNSAFE_PATH_CHARACTERS.sub(lambda match: f"%{ord(match.group()):02X}", value)
    part = part.replace(".", "%2E") if part in (".", "..", "") else part
    return bounded_id(part, MAX_PATH_PART_BYTES, in_bytes=True, digest_of=value)


def task_directory(root: Path, identity: TaskIdentity) -> Path:
    """``<root>/<dag>/<run>/<task>/<map index>``: the same for every try and attempt of the task instance."""
    parts = (identity.dag_id, identity.run_id, identity.task_id, str(identity.map_index))
    return root.joinpath(*(_path_part(part) for part in parts))


def default_root_dir() -> Path:
    home = os.environ.get("AIRFLOW_HOME") or "~/airflow"
    return Path(home).expanduser() / DEFAULT_ROOT_SUBDIR
