"""Capacity accounting for one job queue: who uses what, who borrows, and whether a job fits.

Two ledgers are kept per capacity unit:

* *share usage*: what counts against each share's limits. A running job counts in its share until it
  is chosen as a victim; from that decision on its preemptor counts instead (two-phase preemption).
* *occupancy*: what is physically held. A job being stopped still holds its units until the stop
  completes; a waiting preemptor holds whatever of its request its victims do not already hold.

A job fits when, after adding it: its share has a limit for the unit, stays within its ceiling (its own
limit for RESERVE and LEND shares), the queue is not exceeded physically, and the lending rule holds:
the total borrowed on the unit does not exceed the lenders' idle capacity plus the unowned capacity (or,
where a configuration change already broke that, the overdraft does not grow).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from airflow_quota.engine.model import (
    HOLDING_CAPACITY,
    Job,
    JobQueue,
    JobStatus,
    QueueState,
    QuotaShare,
    SharingStrategy,
)


class Removal(NamedTuple):
    """Jobs hypothetically taken away: units per share (share usage) and units freed physically.

    A named tuple, not a frozen dataclass: a victim search builds one per fit it asks, and a tuple is
    built in C."""

    by_share: Mapping[str, int]
    physical: int


NO_REMOVAL = Removal({}, 0)


@dataclass(frozen=True, slots=True)
class UnitTotals:
    """Per unit of a queue: the capacity all shares own, and the part owned by shares that lend."""

    owned: int
    lent: int

    @staticmethod
    def of(queue: JobQueue) -> dict[str, UnitTotals]:
        owned = dict.fromkeys(queue.capacity, 0)
        lent = dict.fromkeys(queue.capacity, 0)
        for share in queue.shares:
            lends = share.lends
            for unit, limit in share.capacity_limits.items():
                if unit in owned:
                    owned[unit] += limit
                    if lends:
                        lent[unit] += limit
        return {unit: UnitTotals(owned[unit], lent[unit]) for unit in queue.capacity}


class Usage:
    """Mutable usage counters for one cycle, kept exact as decisions are applied."""

    def __init__(self, queue: JobQueue, jobs: Iterable[Job]) -> None:
        self.queue = queue
        self.shares: dict[str, QuotaShare] = {share.name: share for share in queue.shares}
        self.share_usage: dict[tuple[str, str], int] = defaultdict(int)
        self.occupancy: dict[str, int] = defaultdict(int)
        self._borrowed_total: dict[str, int] = defaultdict(int)
        self._lendable_idle: dict[str, int] = defaultdict(int)
        self.totals = UnitTotals.of(queue)
        #: Per unit, the capacity no share owns (constant while the queue is).
        self._unowned = {
            unit: max(0, queue.capacity.get(unit, 0) - totals.owned) for unit, totals in self.totals.items()
        }
        #: Per unit, the shares whose usage there is above their own limit.
        self.borrowing: dict[str, set[str]] = defaultdict(set)

        #: Jobs being stopped whose units are promised to nobody: terminated jobs (they still count in their
        #: share until they have stopped) and victims whose preemptor is gone (their share gave them up).
        self.orphan_ids: set[str] = set()
        reservations: dict[str, Job] = {}
        stopping: list[Job] = []
        for job in jobs:
            request = job.request
            if job.status is JobStatus.RUNNABLE:
                if job.awaiting_victims:
                    reservations[job.job_id] = job
                    self.share_usage[(request.quota_share_name, request.capacity_unit)] += (
                        request.instance_count
                    )
            elif job.status in HOLDING_CAPACITY:
                self.occupancy[request.capacity_unit] += request.instance_count
                if job.stop_cause is None:
                    self.share_usage[(request.quota_share_name, request.capacity_unit)] += (
                        request.instance_count
                    )
                else:
                    stopping.append(job)
        victims_held: dict[str, int] = defaultdict(int)
        for job in stopping:
            preemptor = reservations.get(job.preempted_by) if job.preempted_by else None
            if preemptor is not None and job.job_id in preemptor.awaiting_victims:
                victims_held[preemptor.job_id] += job.count
                continue
            self.orphan_ids.add(job.job_id)
            if job.counts_in_share:
                self.share_usage[(job.share_name, job.unit)] += job.count
        for job in reservations.values():
            self.occupancy[job.unit] += max(0, job.count - victims_held.get(job.job_id, 0))

        units_in_use: dict[str, set[str]] = defaultdict(set)
        for share_name, unit in self.share_usage:
            units_in_use[share_name].add(unit)
        for share in queue.shares:
            for unit in units_in_use[share.name] | set(share.capacity_limits):
                borrowed, lendable = self._share_terms(share, unit, self.usage(share.name, unit))
                self._borrowed_total[unit] += borrowed
                self._lendable_idle[unit] += lendable
                if borrowed:
                    self.borrowing[unit].add(share.name)

    # -- reading -----------------------------------------------------------------------------------

    def usage(self, share_name: str, unit: str) -> int:
        return self.share_usage.get((share_name, unit), 0)

    def removal(self, jobs: Collection[Job]) -> Removal:
        """What taking ``jobs`` away would free: in their shares' usage and physically."""
        if not jobs:
            return NO_REMOVAL  # (most searches: no orphan to take)
        by_share: dict[str, int] = defaultdict(int)
        physical = 0
        for job in jobs:
            count = job.request.instance_count
            physical += count
            if job.counts_in_share:
                by_share[job.request.quota_share_name] += count
        return Removal(by_share, physical)

    def capacity(self, unit: str) -> int:
        return self.queue.capacity.get(unit, 0)

    def idle(self, unit: str) -> int:
        """Units nobody holds physically."""
        return max(0, self.capacity(unit) - self.occupancy.get(unit, 0))

    def others_borrowing(self, share_name: str, unit: str) -> bool:
        """Whether a share other than ``share_name`` is borrowing on ``unit``."""
        return bool(self.borrowing[unit] - {share_name})

    def borrowable_by(self, share_name: str, unit: str) -> int:
        """Units ``share_name`` could borrow from other shares and unowned capacity now (idle, pooled)."""
        share = self.shares.get(share_name)
        own_lendable = self._share_terms(share, unit, self.usage(share_name, unit))[1] if share else 0
        return max(0, min(-self.overdraft(unit) - own_lendable, self.idle(unit)))

    def overdraft(self, unit: str) -> int:
        """Borrowed beyond the lenders' idle plus unowned capacity on ``unit`` (negative: room to lend)."""
        return (
            self._borrowed_total.get(unit, 0) - self._lendable_idle.get(unit, 0) - self._unowned.get(unit, 0)
        )

    def unowned(self, unit: str) -> int:
        return self._unowned.get(unit, 0)

    # -- the fit rule --------------------------------------------------------------------------------

    def fits(
        self,
        share_name: str,
        unit: str,
        count: int,
        removal: Removal = NO_REMOVAL,
        *,
        within_own_limit: bool = False,
    ) -> bool:
        """Whether ``count`` units of ``unit`` can go to ``share_name`` once ``removal`` is taken away.

        With ``within_own_limit`` the share must also end within its own limit (the reclaim search).
        """
        # (The hottest function of a cycle: the small methods it needs are written out.)
        share = self.shares.get(share_name)
        if share is None or unit not in share.capacity_limits:
            return False
        by_share, physical = removal
        if self.occupancy.get(unit, 0) - physical + count > self.queue.capacity.get(unit, 0):
            return False
        own_removed = by_share.get(share_name, 0) if by_share else 0
        new_usage = self.share_usage.get((share_name, unit), 0) - own_removed + count
        if within_own_limit and new_usage > share.capacity_limits[unit]:
            return False
        ceiling = share.ceiling(unit)
        if ceiling is not None and new_usage > ceiling:
            return False
        excess = (
            self._borrowed_total.get(unit, 0) - self._lendable_idle.get(unit, 0) - self._unowned.get(unit, 0)
        )
        after = excess + self._excess_change(share, unit, count - own_removed)
        for name, units in by_share.items():
            if units and name != share_name:
                other = self.shares.get(name)
                if other is not None:
                    after += self._excess_change(other, unit, -units)
        return after <= max(0, excess)

    # -- applying decisions --------------------------------------------------------------------------

    def add_to_share(self, share_name: str, unit: str, units: int) -> None:
        share = self.shares.get(share_name)
        key = (share_name, unit)
        before = self.share_usage.get(key, 0)
        after = self.share_usage[key] = before + units
        if share is None:
            return
        # ``_share_terms`` before and after, written out (every decision calls this).
        own = share.capacity_limits.get(unit, 0)
        new_borrowed = after - own if after > own else 0
        self._borrowed_total[unit] += new_borrowed - (before - own if before > own else 0)
        lent_change = 0
        if share.strategy is not SharingStrategy.RESERVE:
            lent_change = (own - after if own > after else 0) - (own - before if own > before else 0)
        self._lendable_idle[unit] += lent_change
        if new_borrowed:
            self.borrowing[unit].add(share_name)
        else:
            self.borrowing[unit].discard(share_name)

    def add_occupancy(self, unit: str, units: int) -> None:
        self.occupancy[unit] += units

    # -- internals -----------------------------------------------------------------------------------

    @staticmethod
    def _share_terms(share: QuotaShare, unit: str, usage: int) -> tuple[int, int]:
        """(units borrowed, idle units lent to the pool) for ``share`` at ``usage``."""
        own = share.own_limit(unit)
        borrowed = max(0, usage - own)
        lendable = max(0, own - usage) if share.lends else 0
        return borrowed, lendable

    def _excess(self, unit: str, changes: Mapping[str, int]) -> int:
        """Borrowed beyond what lenders' idle and unowned capacity cover, after ``changes`` to usage."""
        excess = (
            self._borrowed_total.get(unit, 0) - self._lendable_idle.get(unit, 0) - self._unowned.get(unit, 0)
        )
        for share_name, delta in changes.items():
            share = self.shares.get(share_name)
            if share is not None:
                excess += self._excess_change(share, unit, delta)
        return excess

    def _excess_change(self, share: QuotaShare, unit: str, delta: int) -> int:
        """How much ``_excess`` changes when ``share``'s usage of ``unit`` changes by ``delta``."""
        if not delta:
            return 0
        own = share.capacity_limits.get(unit, 0)
        before = self.share_usage.get((share.name, unit), 0)
        after = before + delta
        change = max(0, after - own) - max(0, before - own)
        if share.strategy is not SharingStrategy.RESERVE:  # it lends: its idle units count against
            change -= max(0, own - after) - max(0, own - before)
        return change


def usage_of(state: QueueState) -> Usage:
    return Usage(state.queue, state.jobs.values())


def lent_capacity(state: QueueState) -> dict[tuple[str, str], int]:
    """Units each lending share has lent, by (share, unit): what borrowers use beyond the unowned capacity.

    Lending is pooled, so which lender lent a unit is a convention: borrowers use the capacity no share
    owns first, then the lenders' idle capacity in the order the shares are configured.
    """
    usage = usage_of(state)
    lent: dict[tuple[str, str], int] = {}
    for unit in state.queue.capacity:
        borrowed = sum(
            max(0, usage.usage(share.name, unit) - share.own_limit(unit)) for share in state.queue.shares
        )
        to_attribute = max(0, borrowed - usage.unowned(unit))
        for share in state.queue.shares:
            if to_attribute == 0:
                break
            if share.strategy is SharingStrategy.RESERVE:
                continue
            idle = max(0, share.own_limit(unit) - usage.usage(share.name, unit))
            given = min(idle, to_attribute)
            if given:
                lent[(share.name, unit)] = given
                to_attribute -= given
    return lent
