"""The simulator's measurements: capacity held over time, time spent RUNNABLE, preemptions and work lost.

The runner feeds a ``MetricsRecorder`` as things happen (units granted and released, capacity changes,
each job's RUNNABLE time, each completed preemption); ``MetricsRecorder.result`` turns that into
``Metrics``, whose docstring gives the exact definitions (docs/simulator.md repeats them for users).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WaitStats:
    """RUNNABLE seconds of one share's jobs: how many were ever RUNNABLE, mean and p95 (None if none)."""

    jobs: int
    mean: float | None
    p95: float | None


@dataclass(frozen=True, slots=True)
class Metrics:
    """What a run measured.

    * utilization of a unit = unit-seconds held (by SCHEDULED, STARTING and RUNNING jobs, including jobs
      being stopped) / capacity-seconds, both over the span from the first submission to the last
      completion (the last time a job reached SUCCEEDED or FAILED or gave back capacity; the end of the
      simulation when jobs still hold capacity then). Capacity-seconds integrate the queue's capacity,
      which updateJobQueue may change.
    * RUNNABLE time of a job = all the time it spent RUNNABLE (the first wait and every wait after a
      preemption), up to the end of the simulation for a job still waiting then; per share, the mean and
      p95 over the share's jobs that were ever RUNNABLE (a job FAILED at submission is left out).
    * p95 = nearest rank: the smallest value that at least 95% of the values do not exceed.
    * a preemption is counted when a preempted job's stop completes (it is requeued or FAILED); a job that
      finishes while being stopped is not counted. Counted per share of the preempted job.
    * unit-seconds lost by a preemption = instance count x (progress since the last checkpoint when the
      preemption was decided + the time the stop took).
    """

    span_start: float | None
    span_end: float | None
    #: Per capacity unit; None when no capacity was offered over the span (or nothing was submitted).
    utilization: dict[str, float | None]
    runnable_seconds: dict[str, WaitStats]
    preemptions_total: int
    preemptions_by_share: dict[str, int]
    #: Per capacity unit, then per share of the preempted job.
    lost_unit_seconds: dict[str, dict[str, float]]

    def lost_total(self, unit: str) -> float:
        return sum(self.lost_unit_seconds.get(unit, {}).values())


def p95(values: Iterable[float]) -> float | None:
    """Nearest-rank 95th percentile: the smallest value at least 95% of the values do not exceed."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = math.ceil(0.95 * len(ordered))
    return ordered[max(rank, 1) - 1]


def mean(values: Iterable[float]) -> float | None:
    listed = list(values)
    return sum(listed) / len(listed) if listed else None


class MetricsRecorder:
    """Collects what the runner reports, in time order, and computes ``Metrics`` at the end."""

    def __init__(self, capacity: Mapping[str, int]) -> None:
        self._held: dict[str, int] = defaultdict(int)
        self._held_unit_seconds: dict[str, float] = defaultdict(float)
        self._capacity: dict[str, int] = dict(capacity)
        #: (time, capacity per unit from that time on)
        self._capacity_changes: list[tuple[float, dict[str, int]]] = [(-math.inf, dict(capacity))]
        self._clock = 0.0
        self._first_submission: float | None = None
        self._last_completion: float | None = None
        self._runnable: dict[str, list[float]] = defaultdict(list)
        self._preemptions: dict[str, int] = defaultdict(int)
        self._lost: dict[tuple[str, str], float] = defaultdict(float)

    # -- what the runner reports ---------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Move the clock to ``now``, integrating the units held since the last call."""
        elapsed = now - self._clock
        if elapsed > 0:
            for unit, held in self._held.items():
                if held:
                    self._held_unit_seconds[unit] += held * elapsed
            self._clock = now

    def submitted(self, now: float) -> None:
        if self._first_submission is None:
            self._first_submission = now

    def held(self, unit: str, units: int) -> None:
        """``units`` more (or, negative, fewer) units of ``unit`` are held from now on."""
        self._held[unit] += units
        if units < 0:
            self._completed(self._clock)

    def job_final(self, now: float) -> None:
        self._completed(now)

    def capacity_changed(self, now: float, capacity: Mapping[str, int]) -> None:
        self._capacity = dict(capacity)
        self._capacity_changes.append((now, dict(capacity)))

    def runnable_time(self, share_name: str, seconds: float) -> None:
        """One job's total RUNNABLE time (reported once per job that was ever RUNNABLE)."""
        self._runnable[share_name].append(seconds)

    def preempted(self, share_name: str, unit: str, lost_unit_seconds: float) -> None:
        self._preemptions[share_name] += 1
        self._lost[(unit, share_name)] += lost_unit_seconds

    # -- the result ----------------------------------------------------------------------------------

    def result(self, end: float, share_names: Iterable[str]) -> Metrics:
        self.advance(end)
        still_held = any(self._held.values())
        start = self._first_submission
        span_end = end if still_held or self._last_completion is None else self._last_completion
        shares = list(dict.fromkeys([*share_names, *self._runnable, *self._preemptions]))
        units = list(dict.fromkeys(unit for _, capacity in self._capacity_changes for unit in capacity))
        utilization: dict[str, float | None] = {}
        for unit in units:
            offered = self._capacity_seconds(unit, start, span_end) if start is not None else 0.0
            used = self._held_unit_seconds.get(unit, 0.0)
            utilization[unit] = used / offered if offered > 0 else None
        return Metrics(
            span_start=start,
            span_end=span_end if start is not None else None,
            utilization=utilization,
            runnable_seconds={
                share: WaitStats(
                    len(self._runnable[share]), mean(self._runnable[share]), p95(self._runnable[share])
                )
                for share in shares
            },
            preemptions_total=sum(self._preemptions.values()),
            preemptions_by_share={share: self._preemptions.get(share, 0) for share in shares},
            lost_unit_seconds={
                unit: {share: self._lost.get((unit, share), 0.0) for share in shares} for unit in units
            },
        )

    def _completed(self, now: float) -> None:
        if self._last_completion is None or now > self._last_completion:
            self._last_completion = now

    def _capacity_seconds(self, unit: str, start: float, end: float) -> float:
        total = 0.0
        changes = self._capacity_changes
        for index, (since, capacity) in enumerate(changes):
            until = changes[index + 1][0] if index + 1 < len(changes) else math.inf
            low, high = max(since, start), min(until, end)
            if high > low:
                total += capacity.get(unit, 0) * (high - low)
        return total
