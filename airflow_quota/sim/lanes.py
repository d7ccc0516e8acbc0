"""Lay a run's holds out on lanes, one lane per unit of capacity (a GPU), for the timeline picture.

The simulator counts units, it does not name them, so lanes are assigned here: in grant order, each hold
takes the lowest free lanes of its capacity unit (a lane is free again from the moment its hold ended),
which keeps a job on adjacent rows. Its last ``borrowed`` lanes are the borrowed ones. A unit needs more
lanes than its capacity only when holds overlap beyond it (after a capacity decrease); they are added.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from airflow_quota.sim.holds import Hold


@dataclass(frozen=True, slots=True)
class LaneBar:
    """One hold on one lane: ``lane`` counts from 0 within ``hold.unit``; ``borrowed`` if that unit is
    one of the hold's borrowed ones."""

    hold: Hold
    lane: int
    borrowed: bool


def assign_lanes(holds: Iterable[Hold], capacity: Mapping[str, int], end: float) -> list[LaneBar]:
    """A ``LaneBar`` per unit each hold held, in grant order; ``end`` closes holds still open."""
    free: dict[str, list[int]] = defaultdict(list)
    lanes_made: dict[str, int] = defaultdict(int)
    for unit, count in capacity.items():
        free[unit] = list(range(count))
        lanes_made[unit] = count
    #: Per unit: (time the lanes are free again, order, lanes).
    busy: dict[str, list[tuple[float, int, list[int]]]] = defaultdict(list)
    bars: list[LaneBar] = []
    for order, hold in enumerate(sorted(holds, key=lambda each: each.granted_at)):
        unit = hold.unit
        pending = busy[unit]
        while pending and pending[0][0] <= hold.granted_at:
            for lane in heapq.heappop(pending)[2]:
                heapq.heappush(free[unit], lane)
        taken = []
        for _ in range(hold.count):
            if free[unit]:
                taken.append(heapq.heappop(free[unit]))
            else:
                taken.append(lanes_made[unit])
                lanes_made[unit] += 1
        taken.sort()
        heapq.heappush(pending, (hold.until(end), order, taken))
        own = hold.count - hold.borrowed
        bars += [LaneBar(hold, lane, index >= own) for index, lane in enumerate(taken)]
    return bars


def lane_count(bars: Iterable[LaneBar], capacity: Mapping[str, int]) -> dict[str, int]:
    """Lanes per capacity unit: its capacity, or more when holds needed more."""
    counts = dict(capacity)
    for bar in bars:
        counts[bar.hold.unit] = max(counts.get(bar.hold.unit, 0), bar.lane + 1)
    return counts
