"""Run allocation cycles for a host (the scheduler's executor heartbeat, or `airflow quota allocator`).

A host calls ``run_cycle()`` as often as it likes: each call opens its own session on Airflow's engine
(never the scheduler's scoped session: nesting ``create_session`` closes it under the scheduler), runs
one cycle, each job queue's part committed as it ends (``commit_each_queue``), emits the cycle's metrics
through Airflow's ``Stats`` and returns the report. A job queue whose part of the cycle fails is rolled
back alone by the cycle and counted here (``quota.queue.errors``); a cycle that raises is rolled back from
the part it was in (the parts before it committed), logged, and counted (``quota.cycle.errors``); the
host goes on. SQLite's "database is locked" (another process holds its write lock) is no failure: the
part, or the cycle, is tried again after a short pause (``cycle.SQLITE_BUSY_PAUSES``), and logged, once,
as a warning only when the lock persists.

Only once the cycle has committed does the host call out of the process: it asks SageMaker to stop the
training jobs the cycle listed (``request_stops``: victims' and orphans' still running), and keeps the
answers in ``STOPPED_TRAINING_JOBS`` for the next cycle, which releases their capacity; when a victim's
job was found stopped the host runs that next cycle at once (``run_cycles``). Then it lists the checkpoint
prefixes of the running SageMaker training jobs the cycle listed, each at most once per
``checkpoint_listing_interval`` (``checkpoints.list_checkpoints``), and keeps the newest checkpoint found in
``SAGEMAKER_CHECKPOINTS``, which the next cycles copy to the ledger. A cycle that rolled back asks nothing.

A host keeps the job queues' state between its cycles (``KEPT_QUEUES``, ``kept_state``): a cycle that
committed leaves it what it kept, one that failed makes the next read every queue whole; a kept state found
to differ from the ledger when checked is counted (``quota.kept_state.mismatches``).

A host freezes the objects alive once it has started (``freeze_startup_objects``: Airflow's and the
provider's modules, the configuration, the ORM's mappers), so that Python's cyclic garbage collector no
longer walks them at every full collection a cycle's allocations set off (``allocator_cycle.py``
measures the effect).

Settings (``[quota]`` in airflow.cfg or ``AIRFLOW__QUOTA__*``): ``allocation_interval`` (seconds
between cycle starts; ``next_cycle_start``), ``settle_time``, ``stop_deadline``, ``orphan_timeout``,
``max_new_requests``, ``checkpoint_listing_interval``.
Their defaults and meanings are declared once, in the provider info (``get_provider_info.QUOTA_CONFIG``),
where Airflow's configuration takes them from.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from datetime import UTC, datetime, timedelta

from airflow import settings as airflow_settings
from airflow.configuration import conf
from airflow.models.taskinstancekey import TaskInstanceKey
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from airflow_quota.allocator.checkpoints import SageMakerCheckpoints, list_checkpoints
from airflow_quota.allocator.cycle import (
    SQLITE_BUSY_PAUSES,
    CycleReport,
    is_sqlite_busy,
    request_stops,
    run_allocation_cycle,
)
from airflow_quota.allocator.kept_state import KeptQueues
from airflow_quota.allocator.report import first_line
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.allocator.stops import StoppedTrainingJobs
from airflow_quota.allocator.tasks import scheduled_task_keys
from airflow_quota.compat import Stats, get_stats_factory
from airflow_quota.engine.model import HOLDING_CAPACITY, JobStatus
from airflow_quota.engine.usage import lent_capacity, usage_of

log = logging.getLogger(__name__)

SECTION = "quota"

#: The training jobs this process found stopped when it last asked (after its last committed cycle); every
#: cycle it runs reads it (``cycle_settings``). Lost on a restart: the orphans' jobs are then asked again.
STOPPED_TRAINING_JOBS = StoppedTrainingJobs()

#: The newest checkpoint this process found under each running SageMaker training job's prefix, and when
#: it last listed it (``checkpoints``); every cycle it runs copies it to the ledger. Lost on a restart: the
#: prefixes are listed again (the ledger keeps what was copied).
SAGEMAKER_CHECKPOINTS = SageMakerCheckpoints()

#: The job queues as this process's last committed cycle left them (``kept_state``): the next cycle reads
#: only what changed since. Lost on a restart: the first cycle then reads every queue whole.
KEPT_QUEUES = KeptQueues()


def allocation_interval() -> float:
    return conf.getfloat(SECTION, "allocation_interval")


def next_cycle_start(started: float, ended: float, interval: float) -> float:
    """When a host's next cycle may start (monotonic seconds), after one that ran from ``started`` to
    ``ended``: ``interval`` after it started, and never sooner than it took after it ended, so cycles
    take at most half the host's time however long a busy queue makes them."""
    return max(started + interval, ended + (ended - started))


def cycle_settings() -> CycleSettings:
    """The cycle's tunables from Airflow's configuration, with this process's ``STOPPED_TRAINING_JOBS``,
    ``KEPT_QUEUES`` and ``SAGEMAKER_CHECKPOINTS``."""
    return CycleSettings(
        settle_time=timedelta(seconds=conf.getfloat(SECTION, "settle_time")),
        stop_deadline=timedelta(seconds=conf.getfloat(SECTION, "stop_deadline")),
        orphan_timeout=timedelta(seconds=conf.getfloat(SECTION, "orphan_timeout")),
        max_new_requests=conf.getint(SECTION, "max_new_requests"),
        stopped_training_jobs=STOPPED_TRAINING_JOBS,
        kept_queues=KEPT_QUEUES,
        checkpoint_listing_interval=timedelta(seconds=conf.getfloat(SECTION, "checkpoint_listing_interval")),
        sagemaker_checkpoints=SAGEMAKER_CHECKPOINTS,
    )


def initialize_metrics() -> None:
    """Set up Airflow's metrics backend (``[metrics]``) in a process Airflow did not (the CLI daemon)."""
    Stats.initialize(
        factory=get_stats_factory(),
        export_legacy_names=conf.getboolean("metrics", "legacy_names_on"),
    )


def freeze_startup_objects() -> None:
    """Collect, then move every object alive now out of the cyclic garbage collector's reach
    (``gc.freeze()``): a host calls it once it has started, Airflow imported and configured.

    Those objects (tens of thousands of modules, classes, functions and mappers) live as long as the
    process; without the freeze every full collection walks them all again, and a cycle over thousands of
    jobs allocates enough to set several off. Calling it again freezes what was added since, after
    another collection: a LocalExecutor beside the allocator unfreezes everything each time it forks its
    workers (``refreeze_if_thawed``).
    """
    gc.collect()
    gc.freeze()


class _ThawWatch:
    """Whether the frozen objects may have been unfrozen since the last look: a LocalExecutor forks its
    workers between ``gc.freeze()`` and ``gc.unfreeze()``, so a fork is the sign. Counting the frozen
    objects (``gc.get_freeze_count()``) walks all of them, tens of milliseconds in a scheduler: too dear
    for every cycle, so it is done after a fork, and every ``LOOK_EVERY`` cycles in case something else
    unfroze them."""

    LOOK_EVERY = 1000

    def __init__(self) -> None:
        self.forked = False
        self.cycles_since_look = 0
        os.register_at_fork(after_in_parent=self.note_fork)

    def note_fork(self) -> None:
        self.forked = True

    def time_to_look(self) -> bool:
        self.cycles_since_look += 1
        if not self.forked and self.cycles_since_look < self.LOOK_EVERY:
            return False
        self.forked, self.cycles_since_look = False, 0
        return True


THAW_WATCH = _ThawWatch()


def refreeze_if_thawed() -> None:
    """Freeze again (``freeze_startup_objects``) when something in the process unfroze everything: looked
    at after a fork, and now and then (``_ThawWatch``)."""
    if THAW_WATCH.time_to_look() and gc.get_freeze_count() == 0:
        freeze_startup_objects()


def run_cycle(settings: CycleSettings | None = None) -> CycleReport | None:
    """One cycle, each job queue's part in its own transaction, then its stop requests; None when it failed
    (its part in progress rolled back, logged, nothing asked: the next cycle lists again what the committed
    parts would have asked). ``settings`` defaults to ``cycle_settings()``; settings passed in should name a
    ``stopped_training_jobs`` kept across calls, else an orphan's capacity waits for ``orphan_timeout``."""
    engine = _engine()
    settings = settings or cycle_settings()
    started = time.monotonic()
    kept = settings.kept_queues
    for pause in (*SQLITE_BUSY_PAUSES, None):
        try:
            with Session(bind=engine, expire_on_commit=False) as session:
                report = run_allocation_cycle(session, datetime.now(UTC), settings, commit_each_queue=True)
        except Exception as error:
            if kept is not None:
                kept.forget()  # rolled back, or its commit's outcome unknown: the next cycle reads everything
            if pause is not None and is_sqlite_busy(error):  # SQLite's write lock held elsewhere: once more
                time.sleep(pause)
                continue
            if is_sqlite_busy(error):
                log.warning(
                    "Quota allocation cycle: the SQLite database stayed locked by another process through "
                    "%d tries (%s); its uncommitted part was rolled back and will run again",
                    len(SQLITE_BUSY_PAUSES) + 1,
                    first_line(error),
                )
            else:
                log.exception(
                    "Quota allocation cycle failed; its uncommitted part was rolled back and will run again"
                )
            Stats.incr("quota.cycle.errors")
            return None
        break
    if kept is not None and not report.skipped:
        kept.committed()
    emit_metrics(report, time.monotonic() - started)
    request_stops(report, settings)  # committed: victims' and orphans' training jobs are asked to stop now
    list_checkpoints(report, settings)  # and running SageMaker jobs' checkpoint prefixes listed, when due
    return report


def run_cycles(settings: CycleSettings | None = None) -> list[CycleReport | None]:
    """What a host runs each time its interval comes: one cycle (``run_cycle``), and the next one at once
    when, after the first committed, the host found a victim's training job stopped: that next cycle
    releases the victim's capacity and grants it (rather than an interval later). Their reports, in order."""
    first = run_cycle(settings)
    if first is None or not first.victims_found_stopped:
        return [first]
    return [first, run_cycle(settings)]


def tasks_waiting_to_be_queued(report: CycleReport | None) -> list[TaskInstanceKey]:
    """The tasks a committed cycle resumed (granted, told to stop, rejected) that are SCHEDULED now."""
    if report is None or not (report.granted or report.signalled or report.rejected):
        return []
    with Session(bind=_engine(), expire_on_commit=False) as session:
        return scheduled_task_keys(
            session, [lease.ti_id for lease in report.granted], [*report.signalled, *report.rejected]
        )


def _engine() -> Engine:
    engine = airflow_settings.engine
    if engine is None:
        raise RuntimeError("Airflow's ORM is not configured (airflow.settings.engine is None)")
    return engine


def emit_metrics(report: CycleReport, seconds: float) -> None:
    """The cycle's figures: time, grants, preemptions by rule, and per share and unit usage.

    Like Airflow's own pool metrics, each per-share gauge is emitted twice: with tags (for backends that
    keep them: OpenTelemetry, Datadog, InfluxDB-style StatsD) and with the names in the metric name
    (``quota.share.usage.<queue>.<share>.<unit>``) for plain StatsD.
    """
    if report.skipped:
        Stats.incr("quota.cycle.skipped")
        return
    Stats.timing("quota.cycle.duration", seconds * 1000.0)
    Stats.incr("quota.grants", len(report.granted))
    for rule, victims in report.preempted_by_rule.items():
        Stats.incr("quota.preemptions", victims, tags={"rule": rule})
        Stats.incr(f"quota.preemptions.{rule}", victims)
    Stats.incr("quota.rejections", len(report.rejected))
    for queue_name in report.kept_state_mismatches:  # logged by the cycle, repaired by reading it whole
        Stats.incr("quota.kept_state.mismatches", tags={"job_queue": queue_name})
        Stats.incr(f"quota.kept_state.mismatches.{queue_name}")
    for queue_name in report.failed_queues:  # its part rolled back (logged with the error)
        Stats.incr("quota.queue.errors", tags={"job_queue": queue_name})
        Stats.incr(f"quota.queue.errors.{queue_name}")
    for queue_name, state in report.states.items():
        usage = usage_of(state)
        lent = lent_capacity(state)
        for share in state.queue.shares:
            jobs = [job for job in state.jobs.values() if job.share_name == share.name]
            tags = {"job_queue": queue_name, "quota_share": share.name}
            suffix = f"{queue_name}.{share.name}"
            _gauge(
                "quota.share.runnable", sum(job.status is JobStatus.RUNNABLE for job in jobs), tags, suffix
            )
            _gauge("quota.share.running", sum(job.status in HOLDING_CAPACITY for job in jobs), tags, suffix)
            for unit, limit in share.capacity_limits.items():
                used = usage.usage(share.name, unit)
                unit_tags = tags | {"capacity_unit": unit}
                unit_suffix = f"{suffix}.{unit}"
                _gauge("quota.share.usage", used, unit_tags, unit_suffix)
                _gauge("quota.share.borrowed", max(0, used - limit), unit_tags, unit_suffix)
                _gauge("quota.share.idle", max(0, limit - used), unit_tags, unit_suffix)
                _gauge("quota.share.lent", lent.get((share.name, unit), 0), unit_tags, unit_suffix)


def _gauge(name: str, value: int, tags: dict[str, str], suffix: str) -> None:
    Stats.gauge(name, value, tags=tags)
    Stats.gauge(f"{name}.{suffix}", value)
