"""Scenario documents for simulator tests, one line per share or event, and ways to read a result."""

from __future__ import annotations

from typing import Any

from airflow_quota.sim.result import ChangeKind, SimulationResult
from airflow_quota.sim.runner import simulate
from airflow_quota.sim.scenario import Scenario, parse_scenario


def share(
    name: str,
    gpu: int,
    strategy: str = "LEND_AND_BORROW",
    *,
    borrow: int | None = None,
    preempt: bool = False,
    state: str | None = None,
) -> dict[str, Any]:
    sharing: dict[str, Any] = {"strategy": strategy}
    if borrow is not None:
        sharing["borrowLimit"] = borrow
    raw: dict[str, Any] = {
        "quotaShareName": name,
        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": gpu}],
        "resourceSharingConfiguration": sharing,
        "preemptionConfiguration": {"inSharePreemption": "ENABLED" if preempt else "DISABLED"},
    }
    if state is not None:
        raw["state"] = state
    return raw


def submit(
    at: float,
    name: str,
    share_name: str,
    count: int,
    *,
    prio: int = 0,
    duration: float | None = None,
    retries: int | None = None,
) -> dict[str, Any]:
    job: dict[str, Any] = {
        "jobName": name,
        "quotaShareName": share_name,
        "schedulingPriority": prio,
        "capacityUnit": "gpu",
        "instanceCount": count,
    }
    if duration is not None:
        job["duration"] = duration
    if retries is not None:
        job["preemptionRetriesBeforeTermination"] = retries
    return {"at": at, "submitJob": job}


def document(
    shares: list[dict[str, Any]],
    events: list[dict[str, Any]],
    *,
    gpu: int = 4,
    stop: float | None = None,
    start: float | None = None,
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "jobQueue": {"jobQueueName": "q", "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": gpu}]},
        "quotaShares": shares,
        "events": events,
    }
    settings = {
        key: value for key, value in (("stopSeconds", stop), ("startSeconds", start)) if value is not None
    }
    if settings:
        raw["settings"] = settings
    return raw


def scenario(shares: list[dict[str, Any]], events: list[dict[str, Any]], **options: Any) -> Scenario:
    return parse_scenario(document(shares, events, **options), "test.yaml")


def run(shares: list[dict[str, Any]], events: list[dict[str, Any]], **options: Any) -> SimulationResult:
    return simulate(scenario(shares, events, **options))


def when(result: SimulationResult, kind: ChangeKind, job: str) -> list[float]:
    """The times at which ``job`` had a change of ``kind``."""
    return [
        step.at
        for step in result.steps
        for change in step.changes
        if (change.kind, change.subject) == (kind, job)
    ]


def status_at(result: SimulationResult, at: float, job: str) -> tuple[str, str]:
    """(status, statusReason) of ``job`` in the step at ``at``."""
    for step in result.steps:
        if step.at == at:
            view = step.jobs[job]
            return str(view.status), view.status_reason
    raise AssertionError(f"no step at {at}; steps at {[step.at for step in result.steps]}")
