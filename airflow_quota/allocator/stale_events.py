"""The scheduler that hosts the allocator ignores the stale event of a run that deferred (Airflow 3.3's bug).

When a task defers, its worker run ends and the executor reports that run's end as ``success`` for the
try. If the task is resumed (granted, told to stop, its trigger fired) and is QUEUED or RUNNING again
before the scheduler has drained that event, Airflow 3.3 takes it for the end of the resumed run, logs
"state changed externally" and fails the task (apache/airflow#71580 and #72716; the fixes proposed upstream,
#71579 and #72767, treat the event as stale; 3.3.2 forgives it only while the task is still SCHEDULED).
The allocator resumes tasks seconds after they deferred, so it meets this more than plain triggers do:
under load a deferring run's supervisor was seen to report its end 10.9 s after the deferral, past the
``settle_time`` guard, and a preempted job's task failed.

``ignore_stale_defer_exit_events`` applies the upstream fix in the scheduler process that hosts
``QuotaAllocatorExecutor``: before the scheduler processes an executor's events, each ``success`` of a try
whose task instance is QUEUED or RUNNING again with ``next_method`` set (resumed after a deferral, in that
same try) is dropped and logged. Such an event can only be the deferring run's: the resumed run reports its
own end once the task instance has left QUEUED and RUNNING. ``settle_time`` stays (an allocator run as its
own process, ``airflow quota allocator``, has no scheduler to fix). tests/db/test_stale_events.py shows the
bug on the installed Airflow and the fix; when Airflow fixes it, that test says so and this can go.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from airflow.models.taskinstance import TaskInstance
from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.utils.state import TaskInstanceState
from sqlalchemy import select

if TYPE_CHECKING:
    from airflow.executors.base_executor import BaseExecutor
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

#: A resumed try in these states is running again: a ``success`` of the same try is the deferring run's.
RESUMED_STATES = frozenset({TaskInstanceState.QUEUED, TaskInstanceState.RUNNING})


def drop_stale_defer_exit_events(executor: BaseExecutor, session: Session) -> list[TaskInstanceKey]:
    """Remove from ``executor``'s event buffer each stale ``success`` of a run that deferred; return them."""
    successes = [
        key
        for key, (state, _) in executor.event_buffer.items()
        if isinstance(key, TaskInstanceKey) and state == TaskInstanceState.SUCCESS
    ]
    of_successes = TaskInstance.filter_for_tis(successes)
    if of_successes is None:
        return []
    resumed = {
        TaskInstanceKey(row.dag_id, row.task_id, row.run_id, row.try_number, row.map_index)
        for row in session.execute(
            select(
                TaskInstance.dag_id,
                TaskInstance.task_id,
                TaskInstance.run_id,
                TaskInstance.map_index,
                TaskInstance.try_number,
            ).where(
                of_successes,
                TaskInstance.state.in_(RESUMED_STATES),
                TaskInstance.next_method.is_not(None),
            )
        )
    }
    stale = [key for key in successes if key in resumed]
    for key in stale:
        del executor.event_buffer[key]
        log.info(
            "Ignoring the executor's success event of %s: it is the run that deferred (the task instance "
            "runs again in the same try); Airflow 3.3 would fail it (apache/airflow#72716)",
            key,
        )
    return stale


def ignore_stale_defer_exit_events() -> bool:
    """Have this process's scheduler drop such events before it processes an executor's events (once);
    returns whether it was installed now."""
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    original = SchedulerJobRunner.__dict__["process_executor_events"].__func__
    if getattr(original, "quota_ignores_stale_defer_exit_events", False):
        return False

    @functools.wraps(original)
    def process_executor_events(
        cls: type[SchedulerJobRunner],
        executor: BaseExecutor,
        job_id: int | None,
        scheduler_dag_bag: Any,
        session: Session,
    ) -> int:
        drop_stale_defer_exit_events(executor, session)
        return int(original(cls, executor, job_id, scheduler_dag_bag, session))

    process_executor_events.quota_ignores_stale_defer_exit_events = True  # type: ignore[attr-defined]
    SchedulerJobRunner.process_executor_events = classmethod(process_executor_events)  # type: ignore[method-assign,assignment]
    return True
