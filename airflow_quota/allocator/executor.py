"""``QuotaAllocatorExecutor``: hosts the allocator on every scheduler loop, beside the real executor.

List it after the executor that runs tasks::

    [core]
    executor = LocalExecutor,airflow_quota.allocator.executor.QuotaAllocatorExecutor

Tasks keep going to the first executor; this one runs no task. The scheduler calls ``heartbeat()`` on
each executor every loop, and ``sync()`` (called by ``heartbeat``) runs one allocation cycle when
``[quota] allocation_interval`` has passed since the last. With several schedulers each hosts one; on
PostgreSQL an advisory lock lets one cycle run at a time and the others skip.
"""

from __future__ import annotations

import time
from typing import Any

from airflow.executors.base_executor import BaseExecutor

from airflow_quota.allocator.host import allocation_interval, run_cycle


class QuotaAllocatorExecutor(BaseExecutor):
    """An executor that runs no tasks: its heartbeat is the quota allocator's cycle."""

    is_local = True
    is_production = True
    serve_logs = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._interval = allocation_interval()
        self._last_cycle = float("-inf")

    def start(self) -> None:
        self.log.info("Quota allocator hosted by the scheduler: a cycle every %.1f s", self._interval)

    def sync(self) -> None:
        if time.monotonic() - self._last_cycle < self._interval:
            return
        self._last_cycle = time.monotonic()
        report = run_cycle()
        if report is not None and (report.granted or report.preempted or report.rejected or report.stopped):
            self.log.info(
                "Quota cycle: %d granted, %d preempted, %d stopped, %d finished, %d rejected",
                len(report.granted),
                sum(len(victims) for victims in report.preempted.values()),
                len(report.stopped),
                len(report.finished),
                len(report.rejected),
            )

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
