"""Trace mode: replay a CSV of job submissions against a queue of a quota file, and compare with RESERVE.

The CSV has a header row with the columns submitTime, jobName (optional: generated when absent or empty),
quotaShareName, schedulingPriority (optional, default 0), capacityUnit, instanceCount, duration (optional:
empty means the job runs until the end) and, optionally, preemptionRetriesBeforeTermination. Each row is
validated like a job request; problems are reported by line and column. The queue comes from a normal
quota file (the first job queue, or the one named). With ``compare_static`` the same trace is replayed
with every share set to RESERVE, the fixed partition that Airflow pools give, so both can be shown side
by side. Runs skip the per-step timeline, so thousands of jobs take seconds. ``write_trace`` writes
``TraceJob``s in this format (``airflow quota history`` exports the ledger's real jobs with it).
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

from airflow_quota.config_file import read_mapping_file
from airflow_quota.engine.config import ConfigIssue, JobRequestError, parse_quota_config, validate_job_request
from airflow_quota.sim.result import SimulationResult
from airflow_quota.sim.runner import simulate
from airflow_quota.sim.scenario import (
    QueueConfiguration,
    Scenario,
    ScenarioError,
    ScenarioEvent,
    Settings,
    SubmitJob,
)

REQUIRED_COLUMNS = ("submitTime", "quotaShareName", "capacityUnit", "instanceCount")
OPTIONAL_COLUMNS = ("jobName", "schedulingPriority", "duration", "preemptionRetriesBeforeTermination")
#: Stop collecting problems after this many (the file is probably not a trace at all).
MAX_REPORTED_ISSUES = 20

#: The exact meaning of each reported number (printed with the results and included in --json).
DEFINITIONS: dict[str, str] = {
    "utilization": (
        "per capacity unit: unit-seconds held by granted jobs (SCHEDULED, STARTING or RUNNING, jobs being "
        "stopped included) divided by capacity x span; the span runs from the first submission to the last "
        "completion (the end of the run if jobs still hold capacity then)"
    ),
    "wait": (
        "a job's total time RUNNABLE (its first wait plus every wait after a preemption; up to the end of "
        "the run for a job that never got to run); mean and nearest-rank p95 over the share's jobs"
    ),
    "preemptions": (
        "preempted jobs whose stop completed (requeued, or FAILED when out of preemption retries), counted "
        "in the preempted job's share; a job that finishes while being stopped is not counted"
    ),
    "gpuSecondsLost": (
        "per capacity unit, summed over preemptions: instanceCount x (RUNNING progress since the job's last "
        "checkpoint when the preemption was decided + the seconds its stop took). With checkpoint interval "
        "0 a preempted job resumes exactly where it stopped, so only the stop time counts; with an interval "
        "C it checkpoints every C seconds of progress and resumes from the last checkpoint before the "
        "preemption"
    ),
}


@dataclass(frozen=True, slots=True)
class TraceRun:
    """One replay: ``label`` is its JSON key, ``description`` how its column is titled."""

    label: str
    description: str
    result: SimulationResult
    wall_seconds: float


@dataclass(frozen=True, slots=True)
class TraceReport:
    trace_source: str
    config_source: str
    queue_name: str
    job_count: int
    settings: Settings
    checkpoint_interval: float
    runs: tuple[TraceRun, ...]


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One row of a trace, as ``write_trace`` writes it (``duration`` None: it runs until the end)."""

    submit_time: float
    job_name: str
    quota_share_name: str
    scheduling_priority: int
    capacity_unit: str
    instance_count: int
    duration: float | None
    preemption_retries_before_termination: int | None = None


#: The columns ``write_trace`` writes, in order.
TRACE_COLUMNS = (
    "submitTime",
    "jobName",
    "quotaShareName",
    "schedulingPriority",
    "capacityUnit",
    "instanceCount",
    "duration",
    "preemptionRetriesBeforeTermination",
)


def write_trace(jobs: Iterable[TraceJob], handle: IO[str]) -> None:
    """Write ``jobs`` as a trace CSV that ``load_trace`` reads back (seconds to the microsecond)."""
    writer = csv.writer(handle, lineterminator="\n")
    writer.writerow(TRACE_COLUMNS)
    for job in jobs:
        retries = job.preemption_retries_before_termination
        writer.writerow(
            (
                _seconds_text(job.submit_time),
                job.job_name,
                job.quota_share_name,
                job.scheduling_priority,
                job.capacity_unit,
                job.instance_count,
                "" if job.duration is None else _seconds_text(job.duration),
                "" if retries is None else retries,
            )
        )


def _seconds_text(value: float) -> str:
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def run_trace(
    trace_path: str | os.PathLike[str],
    config_path: str | os.PathLike[str],
    *,
    queue_name: str | None = None,
    compare_static: bool = False,
    settings: Settings | None = None,
    checkpoint_interval: float = 0.0,
) -> TraceReport:
    """Replay the trace as configured (and as a fixed partition); raise ``QuotaConfigError`` on bad input."""
    configuration = load_queue_configuration(config_path, queue_name)
    events = load_trace(trace_path, configuration)
    scenarios = [("configured", "as configured", configuration)]
    if compare_static:
        reserved = configuration.with_every_share_reserved(str(config_path))
        scenarios.append(("static", "static (every share RESERVE)", reserved))
    runs = []
    for label, description, queue_configuration in scenarios:
        scenario = Scenario(str(trace_path), queue_configuration, settings or Settings(), events)
        started = time.perf_counter()
        result = simulate(scenario, record_steps=False, checkpoint_interval=checkpoint_interval)
        runs.append(TraceRun(label, description, result, time.perf_counter() - started))
    return TraceReport(
        trace_source=str(trace_path),
        config_source=str(config_path),
        queue_name=configuration.queue.name,
        job_count=len(events),
        settings=settings or Settings(),
        checkpoint_interval=checkpoint_interval,
        runs=tuple(runs),
    )


def load_queue_configuration(
    path: str | os.PathLike[str], queue_name: str | None = None
) -> QueueConfiguration:
    """The named job queue of a quota file (the first one when no name is given), validated."""
    source = str(path)
    raw = read_mapping_file(path)
    config = parse_quota_config(raw, source)
    names = [queue.job_queue_name for queue in config.job_queues]
    index = 0
    if queue_name is not None:
        if queue_name not in names:
            message = f"there is no job queue {queue_name!r} in this file; its job queues: {', '.join(names)}"
            raise ScenarioError(source, [ConfigIssue("jobQueues", message)])
        index = names.index(queue_name)
    raw_queue = raw["jobQueues"][index]
    queue_raw = {key: value for key, value in raw_queue.items() if key != "quotaShares"}
    return QueueConfiguration.parse(queue_raw, raw_queue["quotaShares"], source, f"jobQueues[{index}]")


def load_trace(path: str | os.PathLike[str], configuration: QueueConfiguration) -> tuple[ScenarioEvent, ...]:
    """The trace's rows as submitJob events, in file order; raise ``ScenarioError`` listing the problems."""
    source = str(path)
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            return _parse_rows(csv.DictReader(handle), source, configuration)
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ScenarioError(source, [ConfigIssue("", f"cannot read the trace: {error}")]) from error


def _parse_rows(
    reader: csv.DictReader[str], source: str, configuration: QueueConfiguration
) -> tuple[ScenarioEvent, ...]:
    columns = list(reader.fieldnames or [])
    issues: list[ConfigIssue] = []
    allowed = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)
    for column in columns:
        if column not in allowed:
            issues.append(
                ConfigIssue("header", f"unknown column {column!r}: the columns are {', '.join(allowed)}")
            )
    for column in REQUIRED_COLUMNS:
        if column not in columns:
            issues.append(ConfigIssue("header", f"column {column} is missing: add it to the header row"))
    if issues:
        raise ScenarioError(source, issues)
    share_names = configuration.queue.share_names()
    events: list[ScenarioEvent] = []
    names: dict[str, int] = {}
    for index, row in enumerate(reader):
        line = reader.line_num
        event = _parse_row(row, index, line, share_names, configuration.queue.name, names, issues)
        if event is not None:
            events.append(event)
        if len(issues) >= MAX_REPORTED_ISSUES:
            issues.append(ConfigIssue(f"line {line}", "too many problems; stopped reading here"))
            break
    if issues:
        raise ScenarioError(source, issues)
    return tuple(events)


def _parse_row(
    row: dict[str, str | Any],
    index: int,
    line: int,
    share_names: list[str],
    queue_name: str,
    names: dict[str, int],
    issues: list[ConfigIssue],
) -> ScenarioEvent | None:
    before = len(issues)

    def where(column: str) -> str:
        return f"line {line}, column {column}"

    def cell(column: str) -> str:
        value = row.get(column)
        return value.strip() if isinstance(value, str) else ""

    if None in row:
        issues.append(ConfigIssue(f"line {line}", "more cells than columns in the header"))
    submit_time = _number(cell("submitTime"), where("submitTime"), issues, required=True)
    duration = _number(cell("duration"), where("duration"), issues, required=False)
    name = cell("jobName") or f"job-{index + 1:05d}"
    if name in names:
        issues.append(ConfigIssue(where("jobName"), f"job name {name} is already used on line {names[name]}"))
    names.setdefault(name, line)
    raw: dict[str, Any] = {
        "jobName": name,
        "quotaShareName": cell("quotaShareName"),
        "capacityUnit": cell("capacityUnit"),
        "instanceCount": _integer(cell("instanceCount")),
    }
    if cell("schedulingPriority"):
        raw["schedulingPriority"] = _integer(cell("schedulingPriority"))
    if cell("preemptionRetriesBeforeTermination"):
        raw["preemptionRetriesBeforeTermination"] = _integer(cell("preemptionRetriesBeforeTermination"))
    try:
        request = validate_job_request(raw, "trace")
    except JobRequestError as error:
        issues += [ConfigIssue(where(issue.path), issue.message) for issue in error.issues]
        return None
    if request.quota_share_name not in share_names:
        issues.append(
            ConfigIssue(
                where("quotaShareName"),
                f"quota share {request.quota_share_name!r} does not exist in job queue {queue_name!r}; "
                f"use one of: {', '.join(share_names)}",
            )
        )
    if len(issues) > before or submit_time is None:
        return None
    return ScenarioEvent(index, submit_time, SubmitJob(request, duration))


def _number(text: str, where: str, issues: list[ConfigIssue], *, required: bool) -> float | None:
    if not text:
        if required:
            issues.append(ConfigIssue(where, "is empty: it must be a number of seconds >= 0"))
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        issues.append(ConfigIssue(where, f"is {text!r}: it must be a number of seconds >= 0"))
        return None
    return value


def _integer(text: str) -> int | str:
    """An int when the cell holds one; otherwise the text, for the request validation to report."""
    try:
        return int(text)
    except ValueError:
        return text
