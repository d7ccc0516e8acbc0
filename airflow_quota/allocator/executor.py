"""``QuotaAllocatorExecutor``: hosts the allocator on every scheduler loop, beside the real executor.

List it after the executor that runs tasks::

    [core]
    executor = LocalExecutor,airflow_quota.allocator.executor.QuotaAllocatorExecutor

Tasks keep going to the first executor; this one runs no task. The scheduler calls ``heartbeat()`` on
each executor every loop, and ``sync()`` (called by ``heartbeat``) runs one allocation cycle when
``[quota] allocation_interval`` has passed since the last started (``next_cycle_start``: never sooner
than the last one took, so cycles take at most half the scheduler's time). ``start()`` freezes the
scheduler's objects for the garbage collector (``host.freeze_startup_objects``). With several schedulers each
hosts one; on PostgreSQL an advisory lock lets one cycle run at a time and the others skip.

The heartbeat comes after the loop's scheduling, so a task the cycle resumed (granted, told to stop,
rejected) is queued by the next loop. The scheduler sleeps between loops (``scheduler_idle_sleep_time``)
only when a loop queued nothing and received no executor event; so the executor reports each task it
resumed as an event in state ``scheduled``, which the scheduler logs and otherwise ignores, and the next
loop starts at once instead of up to a second later.

``start()`` also has the scheduler ignore the stale event of a worker run that deferred, which Airflow 3.3
takes for the end of the resumed run and fails the task on (``stale_events``).
"""

from __future__ import annotations

import time
from typing import Any

from airflow.executors.base_executor import BaseExecutor
from airflow.utils.state import TaskInstanceState

from airflow_quota.allocator.cycle import CycleReport
from airflow_quota.allocator.host import (
    allocation_interval,
    freeze_startup_objects,
    next_cycle_start,
    refreeze_if_thawed,
    run_cycles,
    tasks_waiting_to_be_queued,
)
from airflow_quota.allocator.stale_events import ignore_stale_defer_exit_events


class QuotaAllocatorExecutor(BaseExecutor):
    """An executor that runs no tasks: its heartbeat is the quota allocator's cycle."""

    is_local = True
    is_production = True
    serve_logs = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._interval = allocation_interval()
        self._next_cycle = float("-inf")

    def start(self) -> None:
        self.log.info("Quota allocator hosted by the scheduler: a cycle every %g s", self._interval)
        if ignore_stale_defer_exit_events():  # Airflow 3.3 fails a task resumed soon after it deferred
            self.log.info("The scheduler ignores a deferring run's stale success (apache/airflow#72716)")
        freeze_startup_objects()  # the scheduler has imported and configured Airflow by now

    def sync(self) -> None:
        started = time.monotonic()
        if started < self._next_cycle:
            return
        refreeze_if_thawed()  # a LocalExecutor unfreezes everything when it forks its workers
        reports = run_cycles()
        self._next_cycle = next_cycle_start(started, time.monotonic(), self._interval)
        for report in reports:
            self._log_cycle(report)
            self._wake_scheduler(report)

    def _log_cycle(self, report: CycleReport | None) -> None:
        if report is not None and (report.granted or report.preempted or report.rejected or report.stopped):
            self.log.info(
                "Quota cycle: %d granted, %d preempted, %d stopped, %d finished, %d rejected",
                len(report.granted),
                sum(len(victims) for victims in report.preempted.values()),
                len(report.stopped),
                len(report.finished),
                len(report.rejected),
            )

    def _wake_scheduler(self, report: CycleReport | None) -> None:
        """Report the tasks the cycle resumed as ``scheduled`` events: the next loop queues them at once."""
        for key in tasks_waiting_to_be_queued(report):
            self.event_buffer[key] = (TaskInstanceState.SCHEDULED, "resumed by the quota allocator")

    def _process_workloads(self, workloads: Any) -> None:
        raise RuntimeError(
            "QuotaAllocatorExecutor runs no tasks: list it after the executor that does "
            "([core] executor = LocalExecutor,airflow_quota.allocator.executor.QuotaAllocatorExecutor) "
            "and do not name it in a task's executor="
        )

    def end(self) -> None:
        """Nothing to wait for: a cycle commits or rolls back within ``sync``."""

    def terminate(self) -> None:
        """Nothing to kill."""
