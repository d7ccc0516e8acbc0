"""Who held capacity when: one ``Hold`` per granted attempt, kept by the runner for pictures of a run.

A hold runs from the grant until the job's units are free again (its work done, or its stop completed).
When the job is being stopped (preempted or terminated) before that, ``stop_started_at`` says when the
stop began and ``preempted_by`` / ``rule`` name the preemption; the job keeps its units until the stop
completes (two-phase preemption). ``HoldRecorder`` is what the runner feeds as things happen.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class HoldEnd(StrEnum):
    """How a hold ended."""

    SUCCEEDED = "SUCCEEDED"
    REQUEUED = "REQUEUED"
    FAILED = "FAILED"
    #: The run ended while the job still held its units.
    HELD_AT_END = "held at end"


@dataclass(frozen=True, slots=True)
class Hold:
    """One granted attempt of a job: ``count`` units of ``unit``, ``borrowed`` of them above its share's
    limit, from ``granted_at`` to ``released_at`` (None: still held when the run ended)."""

    job_name: str
    share: str
    unit: str
    count: int
    borrowed: int
    priority: int
    attempt: int
    granted_at: float
    released_at: float | None = None
    stop_started_at: float | None = None
    preempted_by: str | None = None
    rule: str | None = None
    end: HoldEnd = HoldEnd.HELD_AT_END
    #: Unit-seconds its preemption lost (``engine.extensions.lost_unit_seconds``), once its stop completed.
    lost_unit_seconds: float | None = None

    def until(self, end: float) -> float:
        """When its units were free again, or ``end`` when the run ended first."""
        return end if self.released_at is None else self.released_at


class HoldRecorder:
    """Collects the holds in grant order; a job has at most one open hold at a time."""

    def __init__(self) -> None:
        self._holds: list[Hold] = []
        self._open: dict[str, int] = {}
        self._attempts: dict[str, int] = {}

    def granted(
        self, job_name: str, share: str, unit: str, count: int, borrowed: int, priority: int, now: float
    ) -> None:
        attempt = self._attempts.get(job_name, 0) + 1
        self._attempts[job_name] = attempt
        self._open[job_name] = len(self._holds)
        self._holds.append(Hold(job_name, share, unit, count, borrowed, priority, attempt, now))

    def stopping(self, job_name: str, now: float, *, by: str | None = None, rule: str | None = None) -> None:
        """The job is being stopped from ``now`` (an earlier stop keeps its start; a later preemptor that
        adopts the stop becomes the one named)."""
        index = self._open.get(job_name)
        if index is None:
            return
        hold = self._holds[index]
        started = now if hold.stop_started_at is None else hold.stop_started_at
        self._holds[index] = replace(
            hold,
            stop_started_at=started,
            preempted_by=by if by is not None else hold.preempted_by,
            rule=rule if rule is not None else hold.rule,
        )

    def released(self, job_name: str, now: float, end: HoldEnd, *, lost: float | None = None) -> None:
        index = self._open.pop(job_name, None)
        if index is not None:
            hold = self._holds[index]
            self._holds[index] = replace(hold, released_at=now, end=end, lost_unit_seconds=lost)

    def holds(self) -> tuple[Hold, ...]:
        return tuple(self._holds)
