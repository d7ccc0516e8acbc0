"""A scenario's updates of its job queue (``UpdateQuotaShare``, ``UpdateJobQueue``): the configuration
after each, validated as a quota file is, and the ``Change`` the timeline shows for it."""

from __future__ import annotations

from airflow_quota.engine.config import QuotaConfigError
from airflow_quota.sim.result import Change, ChangeKind, SimulationError
from airflow_quota.sim.scenario import QueueConfiguration, ScenarioEvent, UpdateJobQueue, UpdateQuotaShare


def share_updated(
    configuration: QueueConfiguration, event: ScenarioEvent, action: UpdateQuotaShare, source: str
) -> tuple[QueueConfiguration, Change]:
    """The configuration once ``action`` changed one quota share; ``SimulationError`` when it cannot."""
    queue = configuration.queue
    try:
        updated = configuration.with_share_update(action.quota_share_name, action.changes, source)
    except KeyError:
        raise SimulationError(
            source,
            f"quota share {action.quota_share_name!r} does not exist in job queue "
            f"{queue.name!r}; use one of: {', '.join(queue.share_names())}",
            event=event,
        ) from None
    except QuotaConfigError as error:
        raise SimulationError(source, _config_problems(error), event=event) from None
    changed = ", ".join(f"{key}={_brief(value)}" for key, value in action.changes.items())
    return updated, Change(ChangeKind.SHARE_UPDATED, action.quota_share_name, changed)


def queue_updated(
    configuration: QueueConfiguration, event: ScenarioEvent, action: UpdateJobQueue, source: str
) -> tuple[QueueConfiguration, Change]:
    """The configuration once ``action`` changed the queue's capacity; ``SimulationError`` when it cannot."""
    try:
        updated = configuration.with_queue_capacity(action.capacity_limits, source)
    except QuotaConfigError as error:
        raise SimulationError(source, _config_problems(error), event=event) from None
    change = Change(
        ChangeKind.QUEUE_UPDATED, updated.queue.name, f"capacityLimits={_brief(action.capacity_limits)}"
    )
    return updated, change


def _config_problems(error: QuotaConfigError) -> str:
    problems = "; ".join(str(issue) for issue in error.issues)
    return f"the configuration after this event would be invalid: {problems}"


def _brief(value: object) -> str:
    """A short rendering of a configuration value for the timeline."""
    if isinstance(value, list) and all(isinstance(item, dict) and "capacityUnit" in item for item in value):
        return (
            "[" + ", ".join(f"{item.get('capacityUnit')} {item.get('maxCapacity')}" for item in value) + "]"
        )
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {item}" for key, item in value.items()) + "}"
    return str(value)
