"""Read a what-if scenario file (YAML or JSON) into typed events, and keep the queue configuration it edits.

A scenario is one job queue, its quota shares (validated exactly like the quota file, by
``engine.config``), optional timing settings and a list of timed events, each with exactly one action.
Every problem in the file is reported with its path inside the file (``events[2].submitJob.instanceCount``)
and all of them are raised together as one ``ScenarioError``. What can only be checked while the
simulation runs (a job name that does not exist yet, an update that breaks the configuration) is left to
the runner, which names the event.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from airflow_quota.config_file import read_mapping_file
from airflow_quota.engine.config import (
    ConfigIssue,
    JobRequestConfig,
    JobRequestError,
    QuotaConfigError,
    parse_queue_with_shares,
    validate_job_request,
)
from airflow_quota.engine.messages import format_loc, join_path, show_value, unknown_key_message
from airflow_quota.engine.model import MAX_PRIORITY, MIN_PRIORITY, JobQueue, JobRequest

#: The actions an event may carry, in the order the docs list them.
ACTION_NAMES = ("submitJob", "updateJob", "terminateJob", "updateQuotaShare", "updateJobQueue")
#: What updateQuotaShare may change (AWS UpdateQuotaShare's fields); each given field replaces the old one.
SHARE_UPDATE_FIELDS = ("capacityLimits", "resourceSharingConfiguration", "preemptionConfiguration", "state")
#: The submitJob fields that are not part of the job request: the simulator's own.
SIMULATOR_JOB_FIELDS = ("duration",)
JOB_REQUEST_FIELDS = tuple(field.alias or name for name, field in JobRequestConfig.model_fields.items())
DEFAULT_TERMINATE_REASON = "Terminated by request"


class ScenarioError(QuotaConfigError):
    """A scenario (or trace) file is invalid; ``issues`` lists every problem with its path in the file."""


# --- the typed scenario ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Settings:
    """How long a stop takes and how long a granted job is STARTING before RUNNING, in seconds."""

    stop_seconds: float = 0.0
    start_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class SubmitJob:
    """Submit a job; ``duration`` is the RUNNING time it needs (None: it runs until the end)."""

    request: JobRequest
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class UpdateJob:
    job_name: str
    scheduling_priority: int


@dataclass(frozen=True, slots=True)
class TerminateJob:
    job_name: str
    reason: str = DEFAULT_TERMINATE_REASON


@dataclass(frozen=True, slots=True)
class UpdateQuotaShare:
    """Replace the given top-level fields of a share (AWS UpdateQuotaShare), as written in the file."""

    quota_share_name: str
    changes: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class UpdateJobQueue:
    """Replace the queue's capacityLimits, as written in the file."""

    capacity_limits: Any


Action = SubmitJob | UpdateJob | TerminateJob | UpdateQuotaShare | UpdateJobQueue

_ACTION_NAME: dict[type[Any], str] = {
    SubmitJob: "submitJob",
    UpdateJob: "updateJob",
    TerminateJob: "terminateJob",
    UpdateQuotaShare: "updateQuotaShare",
    UpdateJobQueue: "updateJobQueue",
}


@dataclass(frozen=True, slots=True)
class ScenarioEvent:
    """One event: its position in the file (``events[index]``), its time and its action."""

    index: int
    at: float
    action: Action

    @property
    def action_name(self) -> str:
        return _ACTION_NAME[type(self.action)]

    @property
    def label(self) -> str:
        """How error messages name the event: ``events[3] (at 6, terminateJob)``."""
        return f"events[{self.index}] (at {format_seconds(self.at)}, {self.action_name})"


@dataclass(frozen=True, slots=True)
class QueueConfiguration:
    """The queue and its shares as written (AWS shapes), and the validated ``JobQueue`` they make.

    Updates are applied to the written form and validated again as a whole, so an event can never leave a
    configuration that the quota file itself would refuse.
    """

    queue_raw: Mapping[str, Any]
    shares_raw: tuple[Mapping[str, Any], ...]
    queue: JobQueue

    @staticmethod
    def parse(queue_raw: Any, shares_raw: Any, source: str, path_prefix: str = "") -> QueueConfiguration:
        """Validate a queue and its shares; raise ``QuotaConfigError`` with every problem."""
        # A list, not a tuple: engine.config skips its cross-share checks for anything but a list.
        shares = list(shares_raw) if isinstance(shares_raw, tuple) else shares_raw
        queue = parse_queue_with_shares(queue_raw, shares, source, path_prefix)
        return QueueConfiguration(dict(queue_raw), tuple(dict(share) for share in shares), queue)

    def with_share_update(
        self, share_name: str, changes: Mapping[str, Any], source: str
    ) -> QueueConfiguration:
        """The configuration with ``changes`` replacing those fields of ``share_name``; KeyError if none."""
        index = self.share_index(share_name)
        shares = list(self.shares_raw)
        shares[index] = {**shares[index], **changes}
        return QueueConfiguration.parse(self.queue_raw, shares, source)

    def with_queue_capacity(self, capacity_limits: Any, source: str) -> QueueConfiguration:
        return QueueConfiguration.parse(
            {**self.queue_raw, "capacityLimits": capacity_limits}, self.shares_raw, source
        )

    def with_every_share_reserved(self, source: str) -> QueueConfiguration:
        """The same queue as a fixed partition: every share RESERVE (no lending, no borrowing)."""
        shares = []
        for share in self.shares_raw:
            sharing = {
                key: value
                for key, value in dict(share.get("resourceSharingConfiguration") or {}).items()
                if key != "borrowLimit"
            }
            shares.append({**share, "resourceSharingConfiguration": {**sharing, "strategy": "RESERVE"}})
        return QueueConfiguration.parse(self.queue_raw, shares, source)

    def share_index(self, share_name: str) -> int:
        for index, share in enumerate(self.shares_raw):
            if share.get("quotaShareName") == share_name:
                return index
        raise KeyError(share_name)


@dataclass(frozen=True, slots=True)
class Scenario:
    source: str
    configuration: QueueConfiguration
    settings: Settings = Settings()
    events: tuple[ScenarioEvent, ...] = field(default=())


# --- reading ----------------------------------------------------------------------------------------------


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate a scenario file; raise ``ScenarioError`` (or ``QuotaConfigError``) on problems."""
    return parse_scenario(read_mapping_file(path), str(path))


def parse_scenario(raw: Mapping[str, Any], source: str) -> Scenario:
    """Validate a loaded scenario document; raise ``ScenarioError`` listing every problem with its path."""
    issues: list[ConfigIssue] = []
    try:
        document = _ScenarioDocument.model_validate(raw)
    except ValidationError as error:
        issues += [_issue(tuple(detail["loc"]), detail) for detail in error.errors()]
        document = None
    configuration: QueueConfiguration | None = None
    if isinstance(raw, Mapping) and "jobQueue" in raw and "quotaShares" in raw:
        try:
            configuration = QueueConfiguration.parse(raw["jobQueue"], raw["quotaShares"], source)
        except QuotaConfigError as error:
            issues += error.issues
    events: list[ScenarioEvent] = []
    raw_events = raw.get("events") if isinstance(raw, Mapping) else None
    for index, raw_event in enumerate(raw_events if isinstance(raw_events, list) else []):
        try:
            event = _EventModel.model_validate(raw_event)
        except ValidationError as error:
            issues += [_issue(("events", index, *detail["loc"]), detail) for detail in error.errors()]
            continue
        action = _action(event, f"events[{index}]", source, issues)
        if action is not None:
            events.append(ScenarioEvent(index, event.at, action))
    if issues or document is None or configuration is None:
        raise ScenarioError(source, _unique(issues))
    settings = Settings(document.settings.stopSeconds, document.settings.startSeconds)
    return Scenario(source, configuration, settings, tuple(events))


def job_request_from(
    raw: Mapping[str, Any], path: str, source: str, issues: list[ConfigIssue]
) -> JobRequest | None:
    """Validate the request fields of ``raw`` (simulator fields set aside), adding issues at ``path``."""
    request_raw = {key: value for key, value in raw.items() if key not in SIMULATOR_JOB_FIELDS}
    try:
        return validate_job_request(request_raw, source)
    except JobRequestError as error:
        issues += [ConfigIssue(join_path(path, issue.path), issue.message) for issue in error.issues]
        return None


def format_seconds(seconds: float) -> str:
    """``5`` for 5.0, ``2.5`` for 2.5: times the way a user wrote them."""
    return str(int(seconds)) if float(seconds).is_integer() else str(round(seconds, 6))


# --- the file's shape ---------------------------------------------------------------------------------------

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _SettingsModel(_Strict):
    stopSeconds: Seconds = 0.0
    startSeconds: Seconds = 0.0


class _UpdateJobModel(_Strict):
    jobName: str
    schedulingPriority: Annotated[int, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY)]


class _TerminateJobModel(_Strict):
    jobName: str
    reason: str = DEFAULT_TERMINATE_REASON


class _UpdateJobQueueModel(_Strict):
    capacityLimits: Any


class _EventModel(_Strict):
    at: Seconds
    submitJob: dict[str, Any] | None = None
    updateJob: _UpdateJobModel | None = None
    terminateJob: _TerminateJobModel | None = None
    updateQuotaShare: dict[str, Any] | None = None
    updateJobQueue: _UpdateJobQueueModel | None = None

    @model_validator(mode="before")
    @classmethod
    def _exactly_one_action(cls, raw: Any) -> Any:
        if isinstance(raw, Mapping):
            given = [name for name in ACTION_NAMES if name in raw]
            if len(given) != 1:
                found = "none" if not given else " and ".join(given)
                raise PydanticCustomError(
                    "scenario_one_action",
                    "an event needs exactly one action, found {found}: give one of {allowed} (and at)",
                    {"found": found, "allowed": ", ".join(ACTION_NAMES)},
                )
        return raw


class _ScenarioDocument(_Strict):
    jobQueue: Any
    quotaShares: Any
    settings: _SettingsModel = _SettingsModel()
    #: Each event is validated on its own (``_EventModel``) so one bad event does not hide the others.
    events: list[Any] = Field(default_factory=list)


def _action(event: _EventModel, path: str, source: str, issues: list[ConfigIssue]) -> Action | None:
    if event.submitJob is not None:
        return _submit_job(event.submitJob, f"{path}.submitJob", source, issues)
    if event.updateJob is not None:
        return UpdateJob(event.updateJob.jobName, event.updateJob.schedulingPriority)
    if event.terminateJob is not None:
        return TerminateJob(event.terminateJob.jobName, event.terminateJob.reason)
    if event.updateQuotaShare is not None:
        return _update_quota_share(event.updateQuotaShare, f"{path}.updateQuotaShare", issues)
    if event.updateJobQueue is not None:
        return UpdateJobQueue(event.updateJobQueue.capacityLimits)
    return None


def _submit_job(raw: dict[str, Any], path: str, source: str, issues: list[ConfigIssue]) -> SubmitJob | None:
    before = len(issues)
    allowed = (*JOB_REQUEST_FIELDS, *SIMULATOR_JOB_FIELDS)
    issues += _unknown_keys(raw, allowed, path)
    duration = raw.get("duration")
    if duration is not None and (
        isinstance(duration, bool)
        or not isinstance(duration, int | float)
        or not 0 <= duration < float("inf")
    ):
        issues.append(
            ConfigIssue(
                f"{path}.duration",
                f"duration is {duration!r}: it must be a number of seconds >= 0 (the RUNNING time the job "
                "needs), or left out for a job that runs until the end",
            )
        )
    known = {key: value for key, value in raw.items() if key in allowed}
    request = job_request_from(known, path, source, issues)
    if request is None or len(issues) > before:
        return None
    return SubmitJob(request, None if duration is None else float(duration))


def _update_quota_share(raw: dict[str, Any], path: str, issues: list[ConfigIssue]) -> UpdateQuotaShare | None:
    before = len(issues)
    issues += _unknown_keys(raw, ("quotaShareName", *SHARE_UPDATE_FIELDS), path)
    name = raw.get("quotaShareName")
    if not isinstance(name, str):
        shown = "missing" if name is None else f"{name!r}"
        issues.append(
            ConfigIssue(
                f"{path}.quotaShareName",
                f"quotaShareName is {shown}: name the quota share to update",
            )
        )
    if not any(key in raw for key in SHARE_UPDATE_FIELDS):
        issues.append(
            ConfigIssue(path, f"nothing to update: give at least one of {', '.join(SHARE_UPDATE_FIELDS)}")
        )
    if len(issues) > before or not isinstance(name, str):
        return None
    return UpdateQuotaShare(name, {key: raw[key] for key in SHARE_UPDATE_FIELDS if key in raw})


def _unknown_keys(raw: Mapping[str, Any], allowed: Sequence[str], path: str) -> list[ConfigIssue]:
    return [
        ConfigIssue(join_path(path, str(key)), unknown_key_message(str(key), allowed))
        for key in raw
        if key not in allowed
    ]


_MODEL_AT_TOP: dict[str, type[BaseModel]] = {
    "settings": _SettingsModel,
    "updateJob": _UpdateJobModel,
    "terminateJob": _TerminateJobModel,
    "updateJobQueue": _UpdateJobQueueModel,
}


def _issue(loc: tuple[int | str, ...], detail: ErrorDetails) -> ConfigIssue:
    """A pydantic error at ``loc`` in the scenario's own structure, in the words quota file errors use."""
    path = format_loc(loc)
    label = path.rsplit(".", 1)[-1] if path else "the top level"
    kind = detail["type"]
    if kind == "scenario_one_action":
        return ConfigIssue(path, detail["msg"])
    if kind == "extra_forbidden":
        return ConfigIssue(path, unknown_key_message(str(loc[-1]), _allowed_at(loc[:-1])))
    if kind == "missing":
        return ConfigIssue(path, f"{label} is missing: add it")
    shown = show_value(detail["input"])
    field = loc[-1] if loc and isinstance(loc[-1], str) else ""
    expected = _EXPECTED.get(field) or _EXPECTED_BY_KIND.get(kind)
    message = f"it must be {expected}" if expected else detail["msg"]
    return ConfigIssue(path, f"{label} is {shown}: {message}")


#: What a field must hold, in the words error messages use.
_EXPECTED = {
    "at": "a number of seconds >= 0 (when the event happens)",
    "stopSeconds": "a number of seconds >= 0 (how long a stop takes)",
    "startSeconds": "a number of seconds >= 0 (how long a granted job is STARTING)",
    "schedulingPriority": f"a whole number from {MIN_PRIORITY} to {MAX_PRIORITY} (higher runs first)",
    "jobName": "a job name",
    "reason": "a string",
    "settings": "a mapping with the keys stopSeconds, startSeconds",
    "events": "a list of events",
}
_EXPECTED_BY_KIND = {
    "dict_type": "a mapping (key: value pairs)",
    "model_type": "a mapping (key: value pairs)",
    "list_type": "a list",
}


def _allowed_at(loc: tuple[int | str, ...]) -> list[str]:
    named = [step for step in loc if isinstance(step, str)]
    if not named:
        return list(_ScenarioDocument.model_fields)
    model = _MODEL_AT_TOP.get(named[-1])
    if model is not None:
        return list(model.model_fields)
    if named[-1] == "events":
        return ["at", *ACTION_NAMES]
    return []


def _unique(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    seen: set[tuple[str, str]] = set()
    unique: list[ConfigIssue] = []
    for issue in issues:
        key = (issue.path, issue.message)
        if key not in seen:
            seen.add(key)
            unique.append(issue)
    return unique
