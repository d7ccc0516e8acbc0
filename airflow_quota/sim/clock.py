"""The simulated clock's timers: when a job's work ends, its start ends or its stop completes.

A timer belongs to one attempt of its job (``JobRecord.epoch``): once the job's epoch moves on (a new
attempt, a stop completed, its work done), the timer is void and skipped.
"""

from __future__ import annotations

import heapq
from enum import IntEnum

from airflow_quota.sim.jobs import JobRecord


class Timer(IntEnum):
    """What falls due; at one moment work ends first, then starts, then stops, then wake-ups."""

    WORK_DONE = 0
    STARTED = 1
    STOPPED = 2
    #: Nothing ends: the job's minimum run time before preemption has passed, or a preemption put off may
    #: be made (``CyclePlan.deferred``), and a cycle must run then.
    WAKE = 3


class Timers:
    """The timers still due, earliest first (at one moment: by ``Timer``, then in the order set)."""

    __slots__ = ("_heap", "_records", "_seq")

    def __init__(self, records: dict[str, JobRecord]) -> None:
        #: The jobs' records by name, whose epochs say which timers still apply.
        self._records = records
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._seq = 0

    def push(self, at: float, kind: Timer, record: JobRecord) -> None:
        """Set a ``kind`` timer at ``at`` for ``record``'s current attempt."""
        self._seq += 1
        heapq.heappush(self._heap, (at, int(kind), self._seq, record.name, record.epoch))

    def next_at(self) -> float | None:
        """When the next timer that still applies falls due (void ones are dropped); None when none."""
        while self._heap:
            at, _, _, name, epoch = self._heap[0]
            if self._records[name].epoch == epoch:
                return at
            heapq.heappop(self._heap)
        return None

    def pop_due(self, now: float) -> tuple[Timer, JobRecord] | None:
        """The next timer due at or before ``now``, removed, and its job's record; None when none is due."""
        at = self.next_at()
        if at is None or at > now:
            return None
        _, kind, _, name, _ = heapq.heappop(self._heap)
        return Timer(kind), self._records[name]
