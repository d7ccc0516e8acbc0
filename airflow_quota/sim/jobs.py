"""The simulator's own bookkeeping for one job, beside the engine's view of it: its work done so far, its
attempt (``epoch``) and how long it waited."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_quota.engine.model import Job


@dataclass(slots=True)
class JobRecord:
    """The simulator's own bookkeeping for one job, beside the engine's view of it."""

    name: str
    share: str
    unit: str
    count: int
    duration: float | None
    submitted_at: float
    #: Bumped whenever the job's timers no longer apply (a new attempt, a stop completed, work done).
    epoch: int = 0
    #: RUNNING seconds of work kept so far (as of ``running_since`` when running).
    progress: float = 0.0
    running_since: float | None = None
    stop_started_at: float | None = None
    progress_at_stop: float = 0.0
    runnable_since: float | None = None
    runnable_seconds: float = 0.0
    ever_runnable: bool = False
    started_at: float | None = None
    stopped_at: float | None = None
    first_started_at: float | None = None
    #: Seconds it held its units, over the attempts that ended (granted until released).
    held_seconds: float = 0.0
    #: Unit-seconds its preemptions lost (the figure each completed preemption adds to the metrics).
    lost_unit_seconds: float = 0.0
    #: The engine's last view of the job once it is SUCCEEDED or FAILED (dropped from the engine state).
    final: Job | None = None
    reported_reason: str = ""

    def progress_at(self, now: float) -> float:
        return self.progress + (now - self.running_since if self.running_since is not None else 0.0)
