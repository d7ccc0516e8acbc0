"""Capacity accounting for one job queue: who uses what, who borrows, and whether a job fits.

Jobs being stopped are physical: a job keeps its units, and keeps counting in its own share, until its
stop has ended. A waiting job that will take units of jobs being stopped (a preemptor its victims', or a
job promised the spare units of a stop under way) holds a *reservation*: it awaits those stops, each giving
it the units its decision split off (``split_claim``, kept on the job; ``allocate_claims`` reads them back,
``Claims``). Three figures are kept per share
and capacity unit:

* *usage* (``usage``): what the share holds now, against its own limit and its ceiling: its jobs holding
  capacity, those being stopped included, and its reservations, less the units they take from its own
  jobs being stopped (counted once, not twice);
* *future usage* (``future_usage``): what the share will hold once the stops under way have ended and
  every reservation is granted: its jobs not being stopped and its reservations, whole. Lending is judged
  on it: a lender taking back its units while the borrower's job stops is not "borrowing";
* and per unit the *occupancy*: what is physically held: every job holding capacity, and of each
  reservation the units its stops do not give it.

A job fits when, after adding it (and what it would take from jobs being stopped, a ``Claim``): its share
has a limit for the unit, its usage stays within its ceiling (its own limit for RESERVE and LEND shares),
the queue is not exceeded physically, a job of a share that is not RESERVE leaves idle the units RESERVE
shares have free (``reserve_free``: while a lender's units are still held by a borrower being stopped,
nobody else's job lands on RESERVE capacity), and the lending rule holds on the future usage: the total
borrowed on the unit does not exceed the lenders' idle capacity plus the unowned capacity (or, where a
configuration change or a reclaim under way already broke that, the overdraft does not grow).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
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


class Claim(NamedTuple):
    """What a job would take from jobs being stopped instead of idle capacity.

    ``physical``: units of jobs being stopped it would take (its victims', spare units of stops under
    way); ``own``: of those, units of its own share's jobs (its share counts them once); ``leaving``: per
    share, the units of victims newly chosen, which leave that share's future usage. A named tuple: a
    victim search builds one per fit it asks, and a tuple is built in C.
    """

    own: int
    physical: int
    leaving: Mapping[str, int]


NO_CLAIM = Claim(0, 0, {})


def _turn_order(job: Job) -> tuple[int, tuple[float, int], str]:
    """Priority descending, then submission: the order a cycle gives jobs their turns."""
    return (-job.request.scheduling_priority, job.submitted, job.job_id)


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


#: Per reservation (job id), the units each stop it awaits gives it (stop's job id -> units).
Claims = dict[str, dict[str, int]]


def split_claim(job: Job, victims: Iterable[Job], spare: Iterable[tuple[Job, int]]) -> dict[str, int]:
    """How many units each stop gives ``job`` when it is decided: its ``victims``' units first, then the
    ``spare`` units of stops under way (each with how many are spare), its own share's stops first in each
    (its share counts those units once), never more than it needs. Every stop chosen is listed, with 0
    units where the job needs none of its units (a victim, or a stop that frees room in a queue whose
    capacity was lowered): the job waits for each. The split is kept on the job
    (``Job.awaiting_victims``); ``engine.victims`` counts a candidate set the same way."""
    share_name = job.request.quota_share_name
    need = job.request.instance_count
    claim: dict[str, int] = {}

    def take(stops: Iterable[tuple[Job, int]]) -> None:
        nonlocal need
        for stop, units in sorted(stops, key=lambda entry: entry[0].request.quota_share_name != share_name):
            claim[stop.job_id] = taken = min(need, units)
            need -= taken

    take((victim, victim.request.instance_count) for victim in victims)
    take(spare)
    return claim


def allocate_claims(
    reservations: Iterable[Job], stopping: Mapping[str, Job]
) -> tuple[Claims, dict[str, int]]:
    """The units of the jobs being stopped (``stopping``, by job id) that each reservation awaiting them
    gets, and the units of each stop nobody gets (its spare units).

    Each reservation gets what its decision split off for it (``split_claim``, kept in
    ``Job.awaiting_victims``; a cycle's step 1 moves what an ended stop gave it) from each stop still
    under way that it lists, 0 units included (it waits for each). Decisions split only units nobody else
    had, so the claims never overlap; the reading is defensive all the same: a victim's own preemptor
    first, then the others by priority and submission, never more than the stop has left or the
    reservation needs. (A ledger written before the split was kept lists each stop with the job's whole
    count: the same order then splits them.)
    """
    left = {job_id: job.request.instance_count for job_id, job in stopping.items()}
    ordered = sorted(reservations, key=_turn_order)
    claims: Claims = {job.job_id: {} for job in ordered}
    for own_victims in (True, False):  # each victim's own preemptor first
        for reservation in ordered:
            taken = claims[reservation.job_id]
            need = reservation.request.instance_count - sum(taken.values())
            unit = reservation.request.capacity_unit
            for stop_id, promised in reservation.awaiting_victims.items():
                stop = stopping.get(stop_id)
                if stop is None or (stop.preempted_by == reservation.job_id) is not own_victims:
                    continue
                if stop.request.capacity_unit != unit:
                    continue
                units = min(promised, need, left[stop_id])
                if units > 0 or own_victims or promised == 0:  # (awaited, giving nothing)
                    taken[stop_id] = units
                    left[stop_id] -= units
                    need -= units
    return claims, left


class Usage:
    """Mutable usage counters for one cycle, kept exact as decisions are applied."""

    def __init__(self, queue: JobQueue, jobs: Iterable[Job]) -> None:
        self.queue = queue
        self.shares: dict[str, QuotaShare] = {share.name: share for share in queue.shares}
        #: Per (share, unit): what the share holds now (module docstring), and once the stops have ended.
        self.share_usage: dict[tuple[str, str], int] = defaultdict(int)
        self.future_usage: dict[tuple[str, str], int] = defaultdict(int)
        self.occupancy: dict[str, int] = defaultdict(int)
        self._borrowed_total: dict[str, int] = defaultdict(int)
        self._lendable_idle: dict[str, int] = defaultdict(int)
        self.totals = UnitTotals.of(queue)
        #: Per unit, the capacity no share owns (constant while the queue is).
        self._unowned = {
            unit: max(0, queue.capacity.get(unit, 0) - totals.owned) for unit, totals in self.totals.items()
        }
        #: Per unit, the shares whose future usage there is above their own limit.
        self.borrowing: dict[str, set[str]] = defaultdict(set)
        #: Per unit, the units RESERVE shares have free within their own limits (kept idle for them).
        self.reserve_free: dict[str, int] = defaultdict(int)
        #: The reservations and the jobs being stopped, per unit, by job id.
        self.reservations: dict[str, dict[str, Job]] = defaultdict(dict)
        self.stopping: dict[str, dict[str, Job]] = defaultdict(dict)
        #: Per reservation, the units each stop gives it; per stop, its spare units (``allocate_claims``).
        self.claims: Claims = {}
        self.spare_units: dict[str, int] = {}

        for share in queue.shares:
            if share.strategy is SharingStrategy.RESERVE:
                for unit, limit in share.capacity_limits.items():
                    self.reserve_free[unit] += max(0, limit)
        for job in jobs:
            request = job.request
            key = (request.quota_share_name, request.capacity_unit)
            if job.status is JobStatus.RUNNABLE:
                if job.awaiting_victims:
                    self.reservations[request.capacity_unit][job.job_id] = job
                    self.future_usage[key] += request.instance_count
            elif job.status in HOLDING_CAPACITY:
                self.occupancy[request.capacity_unit] += request.instance_count
                self._add_held(key, request.instance_count)
                if job.stop_cause is None:
                    self.future_usage[key] += request.instance_count
                else:
                    self.stopping[request.capacity_unit][job.job_id] = job
        for unit in {*self.reservations, *self.stopping}:
            self._count_claims(unit)

        units_in_use: dict[str, set[str]] = defaultdict(set)
        for share_name, unit in self.future_usage:
            units_in_use[share_name].add(unit)
        for share in queue.shares:
            for unit in units_in_use[share.name] | set(share.capacity_limits):
                borrowed, lendable = self._share_terms(share, unit, self.future(share.name, unit))
                self._borrowed_total[unit] += borrowed
                self._lendable_idle[unit] += lendable
                if borrowed:
                    self.borrowing[unit].add(share.name)

    # -- reading -----------------------------------------------------------------------------------

    def usage(self, share_name: str, unit: str) -> int:
        """What the share holds of ``unit`` now, its jobs being stopped included."""
        return self.share_usage.get((share_name, unit), 0)

    def future(self, share_name: str, unit: str) -> int:
        """What the share will hold of ``unit`` once the stops under way have ended."""
        return self.future_usage.get((share_name, unit), 0)

    def spare(self, unit: str) -> list[tuple[Job, int]]:
        """The jobs being stopped on ``unit`` with units nobody awaits, and how many: free to claim."""
        spare_units = self.spare_units
        return [
            (job, spare_units[job_id])
            for job_id, job in self.stopping[unit].items()
            if spare_units.get(job_id)
        ]

    def has_spare(self) -> bool:
        return any(self.spare_units.values())

    def own_spare(self, share_name: str, unit: str) -> int:
        """The spare units of the share's own jobs being stopped on ``unit``."""
        stopping = self.stopping.get(unit)
        if not stopping:
            return 0
        return sum(
            self.spare_units.get(job_id, 0)
            for job_id, job in stopping.items()
            if job.request.quota_share_name == share_name
        )

    def stops_giving(self, reservation_id: str) -> list[str]:
        """The stops under way that give the reservation units (what it still waits for)."""
        return sorted(self.claims.get(reservation_id, {}))

    def capacity(self, unit: str) -> int:
        return self.queue.capacity.get(unit, 0)

    def idle(self, unit: str) -> int:
        """Units nobody holds physically."""
        return max(0, self.capacity(unit) - self.occupancy.get(unit, 0))

    def others_borrowing(self, share_name: str, unit: str) -> bool:
        """Whether a share other than ``share_name`` will still be borrowing on ``unit`` after the stops."""
        return bool(self.borrowing[unit] - {share_name})

    def borrowable_by(self, share_name: str, unit: str) -> int:
        """Units ``share_name`` could borrow from other shares and unowned capacity now (idle, pooled)."""
        share = self.shares.get(share_name)
        own_lendable = self._share_terms(share, unit, self.future(share_name, unit))[1] if share else 0
        return max(0, min(-self.overdraft(unit) - own_lendable, self.idle(unit)))

    def overdraft(self, unit: str) -> int:
        """Borrowed beyond the lenders' idle plus unowned capacity on ``unit`` once the stops have ended
        (negative: room to lend)."""
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
        claim: Claim = NO_CLAIM,
        *,
        within_own_limit: bool = False,
    ) -> bool:
        """Whether ``count`` units of ``unit`` can go to ``share_name``, taking ``claim`` from jobs being
        stopped. With ``within_own_limit`` the share must also stay within its own limit (the reclaim
        search)."""
        # (The hottest function of a cycle: the small methods it needs are written out.)
        share = self.shares.get(share_name)
        if share is None or unit not in share.capacity_limits:
            return False
        own, physical, leaving = claim
        occupancy, capacity = self.occupancy.get(unit, 0), self.queue.capacity.get(unit, 0)
        if occupancy - physical + count > capacity:  # (the stops' units free for it, and it)
            return False
        from_idle = count - physical
        kept = self.reserve_free.get(unit, 0) if share.strategy is not SharingStrategy.RESERVE else 0
        if from_idle > 0 and occupancy + from_idle + kept > capacity:  # RESERVE shares' free units stay idle
            return False
        held = self.share_usage.get((share_name, unit), 0) + count - (own if own < count else count)
        if within_own_limit and held > share.capacity_limits[unit]:
            return False
        ceiling = share.ceiling(unit)
        if ceiling is not None and held > ceiling:
            return False
        excess = (
            self._borrowed_total.get(unit, 0) - self._lendable_idle.get(unit, 0) - self._unowned.get(unit, 0)
        )
        after = excess + self._excess_change(
            share, unit, count - (leaving.get(share_name, 0) if leaving else 0)
        )
        if leaving:
            for name, units in leaving.items():
                if units and name != share_name:
                    other = self.shares.get(name)
                    if other is not None:
                        after += self._excess_change(other, unit, -units)
        return after <= max(0, excess)

    # -- applying decisions --------------------------------------------------------------------------

    def hold(self, job: Job, sign: int = 1) -> None:
        """``job`` granted from idle capacity (``sign`` -1: that grant taken back)."""
        request = job.request
        units = sign * request.instance_count
        self._add_held((request.quota_share_name, request.capacity_unit), units)
        self.occupancy[request.capacity_unit] += units
        self._add_future(request.quota_share_name, request.capacity_unit, units)

    def reservation_granted(self, job: Job) -> None:
        """A reservation no stop gives units any more becomes a job holding capacity: nothing it counts
        changes (its units came from idle capacity already)."""
        unit = job.request.capacity_unit
        self.reservations[unit].pop(job.job_id, None)
        self.claims.pop(job.job_id, None)

    def rekeep(self, reservation: Job) -> None:
        """``reservation``, counted already, now keeps another split of the stops it awaits."""
        self._allocate(reservation.request.capacity_unit, new=reservation)

    def stop(self, victim: Job) -> None:
        """``victim`` is being stopped (as it now is): it leaves its share's future usage."""
        request = victim.request
        self._add_future(request.quota_share_name, request.capacity_unit, -request.instance_count)
        self.stopping[request.capacity_unit][victim.job_id] = victim

    def reserve(self, job: Job) -> None:
        """``job`` (awaiting its stops) holds a reservation from now on."""
        request = job.request
        self._add_future(request.quota_share_name, request.capacity_unit, request.instance_count)
        self._allocate(request.capacity_unit, new=job)

    # -- internals -----------------------------------------------------------------------------------

    def _allocate(self, unit: str, new: Job | None = None) -> None:
        """Work out again who gets the units of the stops under way on ``unit``, with ``new``, if given: a
        reservation not counted yet, or one counted that now keeps another split (it replaces the old one).
        Each reservation's old counts are taken back first."""
        reservations = self.reservations[unit]
        for job in reservations.values():
            self._count_reservation(job, -1)
        if new is not None:
            reservations[new.job_id] = new
        self._count_claims(unit)

    def _count_claims(self, unit: str) -> None:
        """Who gets the units of the stops under way on ``unit`` (``allocate_claims``), and what each
        reservation counts: in its share, its units less those its own share's stops give it; physically,
        its units less those any stop gives it."""
        reservations = self.reservations[unit]
        claims, spare = allocate_claims(reservations.values(), self.stopping[unit])
        self.claims.update(claims)
        self.spare_units.update(spare)
        for job in reservations.values():
            self._count_reservation(job, +1)

    def _count_reservation(self, job: Job, sign: int) -> None:
        request = job.request
        taken = self.claims.get(job.job_id, {})
        own = sum(
            units
            for stop_id, units in taken.items()
            if self.stopping[request.capacity_unit][stop_id].request.quota_share_name
            == request.quota_share_name
        )
        count = request.instance_count
        self._add_held((request.quota_share_name, request.capacity_unit), sign * (count - own))
        self.occupancy[request.capacity_unit] += sign * (count - sum(taken.values()))

    def _add_held(self, key: tuple[str, str], units: int) -> None:
        """``units`` more held now by the share of ``key`` (share, unit), RESERVE shares' free units kept."""
        before = self.share_usage.get(key, 0)
        after = self.share_usage[key] = before + units
        share = self.shares.get(key[0])
        if share is not None and share.strategy is SharingStrategy.RESERVE:
            own = share.capacity_limits.get(key[1], 0)
            self.reserve_free[key[1]] += max(0, own - after) - max(0, own - before)

    def _add_future(self, share_name: str, unit: str, units: int) -> None:
        share = self.shares.get(share_name)
        key = (share_name, unit)
        before = self.future_usage.get(key, 0)
        after = self.future_usage[key] = before + units
        if share is None:
            return
        own = share.capacity_limits.get(unit, 0)
        new_borrowed = after - own if after > own else 0
        self._borrowed_total[unit] += new_borrowed - (before - own if before > own else 0)
        if share.strategy is not SharingStrategy.RESERVE:
            self._lendable_idle[unit] += (own - after if own > after else 0) - (
                own - before if own > before else 0
            )
        if new_borrowed:
            self.borrowing[unit].add(share_name)
        else:
            self.borrowing[unit].discard(share_name)

    @staticmethod
    def _share_terms(share: QuotaShare, unit: str, usage: int) -> tuple[int, int]:
        """(units borrowed, idle units lent to the pool) for ``share`` at (future) ``usage``."""
        own = share.own_limit(unit)
        borrowed = max(0, usage - own)
        lendable = max(0, own - usage) if share.lends else 0
        return borrowed, lendable

    def _excess_change(self, share: QuotaShare, unit: str, delta: int) -> int:
        """How much the overdraft changes when ``share``'s future usage of ``unit`` changes by ``delta``."""
        if not delta:
            return 0
        own = share.capacity_limits.get(unit, 0)
        before = self.future_usage.get((share.name, unit), 0)
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
    owns first, then the lenders' idle capacity in the order the shares are configured. Both sides are
    counted as the shares hold them now (jobs being stopped included).
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
