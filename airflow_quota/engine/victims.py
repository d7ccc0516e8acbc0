"""Choosing preemption victims: who may be taken, in which order, and the smallest set that suffices.

The rules (README, "Victim order"):

* Search 1, *reclaim*: only when the preemptor's share is below its own limit on the unit and another
  share is borrowing there. Candidates are the borrowing shares' jobs and, with in-share preemption, the
  share's own strictly lower-priority jobs. A job of another share is taken only while that share, after
  the victims already taken, is still above its own limit. The preemptor must fit with its share ending
  within its own limit.
* Search 2, *in-share priority*: only with in-share preemption; the share's own strictly lower-priority
  jobs; the preemptor must fit (its share may end up borrowing, within its ceiling).
* Jobs already being stopped whose preemptor is gone cost nothing to take and come first in any search;
  when no other search applies they may still be adopted alone.
* Order: stopping orphans, then other shares' jobs before the preemptor's own, lowest priority first,
  most recently started first, most recently submitted first, then job id.
* Then minimize: walk the chosen victims from last to first and drop each one without which the job
  still fits under the same search's rule. If no set makes the job fit, nothing is preempted.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain, compress
from operator import itemgetter

from airflow_quota.engine.model import Job, PreemptionRule
from airflow_quota.engine.usage import Removal, Usage

VictimKey = tuple[bool, bool, int, float, int, float, int, str]
#: The part of the victim order that depends on the candidate alone (``victim_order_key`` without its
#: first two fields).
RankKey = tuple[int, float, int, float, int, str]
Ranked = tuple[RankKey, Job]
#: A candidate in its unit's list: its rank, its share's name (read without touching the job), the job.
UnitRanked = tuple[RankKey, str, Job]
_RANK = itemgetter(0)
_SHARE_NAME = itemgetter(1)
_UNIT_JOB = itemgetter(2)


def rank_key(candidate: Job) -> RankKey:
    started_at, started_seq = candidate.started or (0.0, 0)
    submitted_at, submitted_seq = candidate.submitted
    return (
        candidate.request.scheduling_priority,
        -started_at,
        -started_seq,
        -submitted_at,
        -submitted_seq,
        candidate.job_id,
    )


def victim_order_key(candidate: Job, preemptor_share: str, orphan: bool) -> VictimKey:
    return (not orphan, candidate.share_name == preemptor_share, *rank_key(candidate))


class Candidates:
    """The jobs that could be preempted (holding capacity, not being stopped), per unit and share.

    Each share's jobs are kept in victim order, with their total units, as a cycle grants and preempts:
    a search then reads the few it takes instead of sorting them all.
    """

    def __init__(self) -> None:
        self._ranked: dict[tuple[str, str], list[Ranked]] = defaultdict(list)
        self._units: dict[tuple[str, str], int] = defaultdict(int)
        #: The same jobs per unit, all shares together, in victim order (a reclaim reads the borrowers').
        self._by_unit: dict[str, list[UnitRanked]] = defaultdict(list)

    @classmethod
    def of(cls, jobs: Iterable[Job]) -> Candidates:
        """The candidates ``jobs``, sorted once per list (``add`` inserts one by one)."""
        candidates = cls()
        ranked, by_unit, units = candidates._ranked, candidates._by_unit, candidates._units
        for job in jobs:
            request = job.request
            where = (request.capacity_unit, request.quota_share_name)
            key = rank_key(job)
            ranked[where].append((key, job))
            by_unit[request.capacity_unit].append((key, request.quota_share_name, job))
            units[where] += request.instance_count
        # The rank keys are unique (they end with the job id).
        for entries in ranked.values():
            entries.sort(key=_RANK)
        for unit_entries in by_unit.values():
            unit_entries.sort(key=_RANK)
        return candidates

    def add(self, job: Job) -> None:
        request = job.request
        where = (request.capacity_unit, request.quota_share_name)
        key = rank_key(job)
        insort(self._ranked[where], (key, job), key=_RANK)
        insort(self._by_unit[request.capacity_unit], (key, request.quota_share_name, job), key=_RANK)
        self._units[where] += request.instance_count

    def remove(self, job: Job) -> None:
        """Take ``job`` out, if it is there (a job being stopped never is)."""
        request = job.request
        where = (request.capacity_unit, request.quota_share_name)
        ranked = self._ranked[where]
        key = rank_key(job)
        index = bisect_left(ranked, key, key=_RANK)
        if index < len(ranked) and ranked[index][1].job_id == job.job_id:
            del ranked[index]
            self._units[where] -= request.instance_count
            by_unit = self._by_unit[request.capacity_unit]
            del by_unit[bisect_left(by_unit, key, key=_RANK)]

    def of_share(self, unit: str, share_name: str) -> list[Ranked]:
        """The share's jobs on ``unit``, in victim order."""
        return self._ranked.get((unit, share_name), [])

    def of_shares(self, unit: str, share_names: Collection[str]) -> Iterator[Job]:
        """The jobs on ``unit`` of the shares ``share_names``, in victim order (lazily, filtered in C:
        a search reads only the first few)."""
        entries = self._by_unit.get(unit, [])
        chosen = map(share_names.__contains__, map(_SHARE_NAME, entries))
        return map(_UNIT_JOB, compress(entries, chosen))

    def units(self, unit: str, share_name: str) -> int:
        return self._units.get((unit, share_name), 0)


@dataclass(frozen=True, slots=True)
class VictimChoice:
    rule: PreemptionRule
    victims: tuple[Job, ...]


def choose_victims(
    usage: Usage, preemptor: Job, candidates: Candidates, orphans: Collection[Job]
) -> VictimChoice | None:
    """The victims that let ``preemptor`` fit, or None when no allowed set does.

    ``orphans`` are the jobs of the preemptor's unit being stopped whose preemptor is gone.
    """
    share_name, unit = preemptor.share_name, preemptor.unit
    share = usage.shares.get(share_name)
    if share is None:
        return None
    ranked_orphans: list[Job] = []
    orphan_ids: frozenset[str] = frozenset()
    if orphans:
        ranked_orphans = sorted(orphans, key=lambda job: victim_order_key(job, share_name, True))
        orphan_ids = frozenset(job.job_id for job in orphans)
    own_lower: list[Job] = []
    own_lower_units = 0  # all of them count in the share: none is being stopped
    if share.in_share_preemption:
        own = candidates.of_share(unit, share_name)
        own_lower = [job for _, job in own[: bisect_left(own, (preemptor.priority,), key=_RANK)]]
        own_lower_units = sum(job.request.instance_count for job in own_lower)

    own_limit = share.own_limit(unit)
    used = usage.usage(share_name, unit)
    if used < own_limit and usage.others_borrowing(share_name, unit):
        own_freed = _with_own(usage.removal(orphans), share_name, own_lower_units)
        # Only the share's own jobs lower its usage: without room for the job there, no reclaim can do.
        if used - own_freed.by_share.get(share_name, 0) + preemptor.count <= own_limit:
            borrowers = usage.borrowing[unit] - {share_name}
            # And none without the room physically: what the borrowers hold is added only while the
            # room is short. (The whole fit rule is left to the search: with every borrowing share
            # changed it costs more than the search itself.)
            short = usage.occupancy.get(unit, 0) - own_freed.physical + preemptor.count - usage.capacity(unit)
            for name in borrowers:
                if short <= 0:
                    break
                short -= candidates.units(unit, name)
            if short <= 0:
                borrowed = candidates.of_shares(unit, borrowers)
                ranked = chain(ranked_orphans, borrowed, own_lower)
                found = _search(usage, preemptor, ranked, None, orphan_ids, within_own_limit=True)
                if found:
                    return VictimChoice(PreemptionRule.RECLAIM, found)
    if share.in_share_preemption and (own_lower or ranked_orphans):  # else nothing to take
        in_share = [*ranked_orphans, *own_lower]
        everyone = _with_own(usage.removal(ranked_orphans), share_name, own_lower_units)
        found = _search(usage, preemptor, in_share, everyone, orphan_ids, within_own_limit=False)
        if found:
            return VictimChoice(PreemptionRule.IN_SHARE_PRIORITY, found)
    if orphans:
        found = _search(
            usage,
            preemptor,
            ranked_orphans,
            usage.removal(ranked_orphans),
            orphan_ids,
            within_own_limit=False,
        )
        if found:
            return VictimChoice(PreemptionRule.ADOPT_STOPPING, found)
    return None


def _with_own(removal: Removal, share_name: str, units: int) -> Removal:
    """``removal`` and ``units`` more of ``share_name``'s own jobs, none of them being stopped."""
    if not units:
        return removal
    by_share = dict(removal.by_share)
    by_share[share_name] = by_share.get(share_name, 0) + units
    return Removal(by_share, removal.physical + units)


def _search(
    usage: Usage,
    preemptor: Job,
    ranked: Iterable[Job],
    everyone: Removal | None,
    orphan_ids: frozenset[str],
    *,
    within_own_limit: bool,
) -> tuple[Job, ...] | None:
    """Take candidates (``ranked``: in victim order) until the preemptor fits, then minimize; None if it
    never fits. ``everyone``, what taking them all frees, when given, answers a hopeless search at once."""
    share_name, unit = preemptor.share_name, preemptor.unit

    def fits_without(removal: Removal) -> bool:
        return usage.fits(share_name, unit, preemptor.count, removal, within_own_limit=within_own_limit)

    if everyone is not None and (not everyone.physical or not fits_without(everyone)):
        return None  # taking every candidate would not do: no subset will (fit only grows with removal)
    # Until enough is taken to fit physically, the full fit rule need not be asked.
    short = usage.occupancy.get(unit, 0) + preemptor.count - usage.capacity(unit)
    taken = _Taken()
    for candidate in ranked:
        if _protected(usage, candidate, share_name, taken.by_share, orphan_ids):
            continue
        taken.add(candidate)
        if taken.physical >= short and fits_without(taken.removal()):
            return taken.minimized(fits_without)
    return None


class _Taken:
    """The victims taken so far and what removing them frees, kept up to date as they change."""

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.by_share: dict[str, int] = defaultdict(int)
        self.physical = 0

    def add(self, job: Job) -> None:
        self._count(job, +1)
        self.jobs.append(job)

    def removal(self) -> Removal:
        return Removal(self.by_share, self.physical)

    def minimized(self, fits_without: Callable[[Removal], bool]) -> tuple[Job, ...]:
        """Walk from the last victim to the first, dropping each one the preemptor can do without."""
        for job in reversed(list(self.jobs)):
            self._count(job, -1)
            if len(self.jobs) > 1 and fits_without(self.removal()):
                self.jobs.remove(job)
            else:
                self._count(job, +1)
        return tuple(self.jobs)

    def _count(self, job: Job, sign: int) -> None:
        self.physical += sign * job.count
        if job.counts_in_share:
            self.by_share[job.share_name] += sign * job.count


def _protected(
    usage: Usage,
    candidate: Job,
    preemptor_share: str,
    taken_by_share: Mapping[str, int],
    orphan_ids: frozenset[str],
) -> bool:
    """A job of another share is safe once its share, after the victims taken, is within its limit."""
    if candidate.job_id in orphan_ids or candidate.share_name == preemptor_share:
        return False
    share = usage.shares.get(candidate.share_name)
    own = share.own_limit(candidate.unit) if share else 0
    remaining = usage.usage(candidate.share_name, candidate.unit) - taken_by_share.get(
        candidate.share_name, 0
    )
    return remaining <= own
