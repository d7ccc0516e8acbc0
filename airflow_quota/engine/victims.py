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

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from airflow_quota.engine.model import Job, PreemptionRule
from airflow_quota.engine.usage import Removal, Usage

VictimKey = tuple[bool, bool, int, float, int, float, int, str]


def victim_order_key(candidate: Job, preemptor_share: str, orphan: bool) -> VictimKey:
    started_at, started_seq = candidate.started or (0.0, 0)
    submitted_at, submitted_seq = candidate.submitted
    return (
        not orphan,
        candidate.share_name == preemptor_share,
        candidate.priority,
        -started_at,
        -started_seq,
        -submitted_at,
        -submitted_seq,
        candidate.job_id,
    )


@dataclass(frozen=True, slots=True)
class VictimChoice:
    rule: PreemptionRule
    victims: tuple[Job, ...]


def choose_victims(
    usage: Usage,
    preemptor: Job,
    running_by_share: Mapping[str, Mapping[str, Job]],
    orphans: Collection[Job],
) -> VictimChoice | None:
    """The victims that let ``preemptor`` fit, or None when no allowed set does.

    ``running_by_share`` holds the jobs of the preemptor's unit that hold capacity and are not being
    stopped, per share; ``orphans`` the jobs of that unit being stopped whose preemptor is gone.
    """
    share_name, unit = preemptor.share_name, preemptor.unit
    share = usage.shares.get(share_name)
    if share is None:
        return None
    orphan_ids = frozenset(job.job_id for job in orphans)
    own_lower: list[Job] = []
    if share.in_share_preemption:
        own_jobs = running_by_share.get(share_name, {}).values()
        own_lower = [job for job in own_jobs if job.priority < preemptor.priority]

    below_own_limit = usage.usage(share_name, unit) < share.own_limit(unit)
    if below_own_limit and usage.others_borrowing(share_name, unit):
        borrowing = [
            job
            for name in sorted(usage.borrowing[unit] - {share_name})
            for job in running_by_share.get(name, {}).values()
        ]
        reclaimable = [*orphans, *borrowing, *own_lower]
        found = _search(usage, preemptor, reclaimable, orphan_ids, within_own_limit=True)
        if found:
            return VictimChoice(PreemptionRule.RECLAIM, found)
    if share.in_share_preemption:
        found = _search(usage, preemptor, [*orphans, *own_lower], orphan_ids, within_own_limit=False)
        if found:
            return VictimChoice(PreemptionRule.IN_SHARE_PRIORITY, found)
    if orphans:
        found = _search(usage, preemptor, list(orphans), orphan_ids, within_own_limit=False)
        if found:
            return VictimChoice(PreemptionRule.ADOPT_STOPPING, found)
    return None


def _search(
    usage: Usage,
    preemptor: Job,
    candidates: list[Job],
    orphan_ids: frozenset[str],
    *,
    within_own_limit: bool,
) -> tuple[Job, ...] | None:
    """Take candidates in victim order until the preemptor fits, then minimize; None if it never fits."""
    share_name, unit = preemptor.share_name, preemptor.unit

    def fits_without(removal: Removal) -> bool:
        return usage.fits(share_name, unit, preemptor.count, removal, within_own_limit=within_own_limit)

    if not candidates or not fits_without(usage.removal(candidates)):
        return None  # taking every candidate would not do: no subset will (fit only grows with removal)
    ordered_candidates = sorted(
        candidates, key=lambda job: victim_order_key(job, share_name, job.job_id in orphan_ids)
    )
    taken = _Taken()
    for candidate in ordered_candidates:
        if _protected(usage, candidate, share_name, taken.by_share, orphan_ids):
            continue
        taken.add(candidate)
        if fits_without(taken.removal()):
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
