"""What is wrong with a QuotaTrainingOperator's arguments and quota fields, each problem on its own line.

Found when the DAG file is parsed, a problem is only logged (the DAG and its other tasks load); when the
task runs, it fails the task at once, with no retry and every problem listed. The request itself is the
backend's to check (``TrainingBackend.prepare``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_quota.engine.config import JobRequestError, validate_job_submission

#: The operator's timing knobs, in seconds (>= 0), that it checks itself.
TIMING_ARGUMENTS = (
    "poll_interval",
    "settle_seconds",
    "follow_seconds",
    "capacity_retry_delay",
    "capacity_retry_max_delay",
)
#: The operator's arguments that only the local backend reads.
LOCAL_ARGUMENTS = ("entry_point", "local_root_dir", "working_dir")


def argument_problems(
    *,
    backend: Any,
    has_request: bool,
    seconds: Mapping[str, Any],
    local_arguments: Mapping[str, Any],
    attempt_timeout: Any = None,
) -> list[str]:
    """What is wrong with the operator's own arguments: ``seconds`` are its timing knobs by name,
    ``local_arguments`` its ``LOCAL_ARGUMENTS`` by name."""
    problems = []
    if attempt_timeout is not None and attempt_seconds(attempt_timeout) is None:
        problems.append(
            "attempt_timeout: must be a whole number of seconds >= 1 or a timedelta of whole seconds "
            f"(e.g. timedelta(hours=12)), got {attempt_timeout!r}"
        )
    if backend not in ("sagemaker", "local"):
        problems.append(f"backend: must be 'sagemaker' or 'local', got {backend!r}")
    if not has_request:
        problems.append("training_job_config: required (a request dict, a ModelTrainer, or a callable)")
    for knob, value in seconds.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            problems.append(f"{knob}: must be a number of seconds >= 0, got {value!r}")
    entry_point = local_arguments.get("entry_point")
    if isinstance(entry_point, str):
        problems.append(f"entry_point: give the argv as a list, e.g. [sys.executable, {entry_point!r}]")
    if backend == "local" and entry_point is None:
        problems.append(
            "entry_point: backend='local' needs the argv to run, e.g. [sys.executable, 'train.py']"
        )
    misplaced = sorted(name for name, value in local_arguments.items() if value is not None)
    if backend != "local" and misplaced:
        problems.append(f"{', '.join(misplaced)}: only for backend='local'")
    return problems


def attempt_seconds(attempt_timeout: Any) -> int | None:
    """``attempt_timeout`` (whole seconds >= 1, or a ``timedelta`` of them) in seconds: what AWS Batch's
    ``timeoutConfig.attemptDurationSeconds`` takes; None when it is neither."""
    if isinstance(attempt_timeout, timedelta):
        whole, rest = divmod(attempt_timeout, timedelta(seconds=1))
        return int(whole) if not rest and whole >= 1 else None
    if isinstance(attempt_timeout, int) and not isinstance(attempt_timeout, bool) and attempt_timeout >= 1:
        return attempt_timeout
    return None


def quota_problems(
    source: str,
    *,
    job_queue: Any,
    quota_share_name: Any,
    capacity_unit: str,
    instance_count: int,
    scheduling_priority: Any,
    preemption_retries_before_termination: Any,
) -> list[str]:
    """The quota fields as the allocator will read them (a queue or share name still to render is not
    checked here: it is once rendered)."""
    document = {
        "jobQueue": _rendered_or_placeholder(job_queue),
        "jobName": "job",
        "quotaShareName": _rendered_or_placeholder(quota_share_name),
        "capacityUnit": capacity_unit,
        "instanceCount": instance_count,
        "schedulingPriority": scheduling_priority,
        "preemptionRetriesBeforeTermination": preemption_retries_before_termination,
    }
    try:
        validate_job_submission(document, source=source)
    except JobRequestError as error:
        return [str(issue) for issue in error.issues]
    return []


def problem_list(source: str, problems: list[str]) -> str:
    """``<source>: <n> error(s)`` and each problem indented on its own line."""
    heading = f"{source}: {len(problems)} error{'s' if len(problems) != 1 else ''}"
    return "\n".join([heading, *(f"  {problem}" for problem in problems)])


def has_template(value: Any) -> bool:
    """Whether a templated field's value holds a Jinja template anywhere (rendered only in a worker)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(has_template(key) or has_template(item) for key, item in value.items())
    if isinstance(value, Sequence):
        return any(has_template(item) for item in value)
    return False


def parse_time_job_name(dag_id: str, task_id: str) -> str:
    """The job name of a request that waits from the triggerer: letters, digits, '-' and '_' only."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", f"{dag_id}-{task_id}").strip("-")[:128] or "job"


def _rendered_or_placeholder(value: Any) -> Any:
    return "placeholder" if has_template(value) else value
