"""Choosing preemption victims: who may be taken, in which order, and the smallest set that suffices.

The rules (docs/semantics.md, "Victim order"):

* Search 1, *reclaim*: only when the preemptor's share is below its own limit on the unit and another
  share is borrowing there. Candidates are the borrowing shares' jobs and, with in-share preemption, the
  share's own strictly lower-priority jobs. A job of another share is taken only while that share, after
  the victims already taken, is still above its own limit. The preemptor must fit with its share ending
  within its own limit.
* Search 2, *in-share priority*: only with in-share preemption; the share's own strictly lower-priority
  jobs; the preemptor must fit (its share may end up borrowing, within its ceiling).
* Spare units of stops under way (units of jobs being stopped that no preemptor needs) cost nothing to
  take and come first in any search, the preemptor's own share's first; a job that fits with them alone
  (and idle capacity) is promised them and preempts nobody (``claim_spare``).
* Order: spare units, then other shares' jobs before the preemptor's own, lowest priority first, most
  recently started first, most recently submitted first, then job id.
* Then minimize: walk the chosen victims from last to first and drop each one without which the job
  still fits under the same search's rule. If no set makes the job fit, nothing is preempted.

Jobs being stopped keep counting in their shares until they have stopped (``engine.usage``): a search
asks whether the preemptor fits counting them (its share's ceiling, the queue physically), and whether
lending holds once they have stopped.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter
from typing import NamedTuple

from airflow_quota.engine.extensions import VictimPolicy
from airflow_quota.engine.model import Job, PreemptionRule
from airflow_quota.engine.usage import Claim, Usage

#: The part of the victim order that depends on the candidate alone (the searches put other shares' jobs
#: before the preemptor's own, and spare units of stops under way before both).
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
    """Jobs to stop for a preemptor (``victims``), and the stops under way whose spare units it takes too.

    ``not_before``: set when only victims still within their share's minimum run time would let the
    preemptor fit, or when the victims' shares wait for their next checkpoint (``extensions``): the
    choice may not be made before then, and nothing is preempted now. ``at_checkpoint``: ``not_before``
    is the victims' next checkpoint (+ the margin), the later of the two when both apply.
    """

    rule: PreemptionRule
    victims: tuple[Job, ...]
    spare_of: tuple[Job, ...] = ()
    not_before: float | None = None
    at_checkpoint: bool = False


#: A stop under way with spare units, and how many.
Spare = tuple[Job, int]


def spare_order(spare: Iterable[Spare], share_name: str) -> list[Spare]:
    """Spare units in the order a job of ``share_name`` takes them: its own share's stops first (its share
    counts those units once), then in victim order."""
    return sorted(spare, key=lambda entry: (entry[0].share_name != share_name, *rank_key(entry[0])))


def claim_spare(usage: Usage, job: Job, spare: Sequence[Spare]) -> tuple[Job, ...] | None:
    """The stops under way whose spare units let ``job`` fit (with idle capacity), fewest needed; None
    when they do not. ``spare``: in ``spare_order``."""
    if not spare:
        return None
    found = _search(
        usage, job, [_Entry(stop, units, False) for stop, units in spare], None, within_own_limit=False
    )
    return None if found is None else tuple(entry.job for entry in found)


def choose_victims(
    usage: Usage,
    preemptor: Job,
    candidates: Candidates,
    spare: Sequence[Spare],
    policy: VictimPolicy | None = None,
) -> VictimChoice | None:
    """The victims that let ``preemptor`` fit, or None when no allowed set does.

    ``spare``: the spare units of stops under way on the preemptor's unit, in ``spare_order``; they are
    taken first, at no cost, and the choice says which it took beside its victims. ``policy``: our
    extensions' victim rules (``engine.extensions``), None when no share uses them. When jobs within
    their minimum run time were passed over and no set without them does, the choice the rules would
    make without that protection comes back with ``not_before`` set: when its victims may be taken.
    A choice whose victims' shares wait for their next checkpoint (``preempt_at_checkpoint``) comes back
    with ``not_before`` the latest of those (+ the margin), looked at from when the choice may be made
    (now, or the end of the minimum run time: the later of the two counts); its victims stay the same.
    """
    if policy is None:
        return _choose(usage, preemptor, candidates, spare, None)
    passed_over: list[Job] = []

    def allowed(job: Job) -> bool:
        if policy.may_preempt(job):
            return True
        passed_over.append(job)
        return False

    choice = _choose(usage, preemptor, candidates, spare, policy, allowed)
    if choice is not None or not passed_over:
        return None if choice is None else _at_checkpoint(choice, policy, policy.now)
    later = _choose(usage, preemptor, candidates, spare, policy)
    if later is None:
        return None
    not_before = max(policy.protected_until(victim) or policy.now for victim in later.victims)
    return _at_checkpoint(
        VictimChoice(later.rule, later.victims, later.spare_of, not_before=not_before), policy, not_before
    )


def _at_checkpoint(choice: VictimChoice, policy: VictimPolicy, at: float) -> VictimChoice:
    """``choice``, to be made at ``at``, put off to its victims' next checkpoints when their shares wait
    for them (``VictimPolicy.checkpoint_wait``)."""
    until = policy.checkpoint_wait(choice.victims, at)
    if until is None:
        return choice
    return VictimChoice(choice.rule, choice.victims, choice.spare_of, not_before=until, at_checkpoint=True)


def _choose(
    usage: Usage,
    preemptor: Job,
    candidates: Candidates,
    spare: Sequence[Spare],
    policy: VictimPolicy | None,
    allowed: Callable[[Job], bool] | None = None,
) -> VictimChoice | None:
    """``choose_victims`` taking only the candidates ``allowed`` lets through (all, when None), in the
    order ``policy`` gives them (victim order, when None)."""
    share_name, unit = preemptor.share_name, preemptor.unit
    share = usage.shares.get(share_name)
    if share is None:
        return None
    spare_entries = [_Entry(stop, units, False) for stop, units in spare]
    spare_claim = _claim_of(spare_entries, preemptor)
    own_lower: list[Job] = []
    own_lower_units = 0
    if share.in_share_preemption:
        own = candidates.of_share(unit, share_name)
        own_lower = [job for _, job in own[: bisect_left(own, (preemptor.priority,), key=_RANK)]]
        if policy is not None:
            own_lower = list(policy.order(share_name, filter(allowed, own_lower)))
        own_lower_units = sum(job.request.instance_count for job in own_lower)

    own_limit = share.own_limit(unit)
    used = usage.usage(share_name, unit)
    count = preemptor.count
    if used < own_limit and usage.others_borrowing(share_name, unit):
        own_freed = spare_claim.own + own_lower_units
        # Only the share's own jobs lower its usage: without room for the job there, no reclaim can do.
        if used + count - min(count, own_freed) <= own_limit:
            borrowers = usage.borrowing[unit] - {share_name}
            # And none without the room physically: what the borrowers hold is added only while the
            # room is short. (The whole fit rule is left to the search.)
            short = (
                usage.occupancy.get(unit, 0)
                - spare_claim.physical
                - own_lower_units
                + count
                - usage.capacity(unit)
            )
            for name in borrowers:
                if short <= 0:
                    break
                short -= candidates.units(unit, name)
            if short <= 0:
                others: Iterable[Job] = candidates.of_shares(unit, borrowers)
                if policy is not None:
                    others = policy.order(share_name, filter(allowed, others))
                ranked = [
                    *spare_entries,
                    *(_Entry(job, job.count, True) for job in others),
                    *(_Entry(job, job.count, True) for job in own_lower),
                ]
                found = _search(usage, preemptor, ranked, None, within_own_limit=True)
                if found and any(entry.victim for entry in found):
                    return _choice(PreemptionRule.RECLAIM, found)
    if share.in_share_preemption and own_lower:  # else nothing to take
        in_share = [*spare_entries, *(_Entry(job, job.count, True) for job in own_lower)]
        found = _search(usage, preemptor, in_share, _claim_of(in_share, preemptor), within_own_limit=False)
        if found and any(entry.victim for entry in found):
            return _choice(PreemptionRule.IN_SHARE_PRIORITY, found)
    return None


class _Entry(NamedTuple):
    """A candidate of a search: a job to preempt (``victim``), or a stop under way's spare ``units``."""

    job: Job
    units: int
    victim: bool


def _choice(rule: PreemptionRule, found: Sequence[_Entry]) -> VictimChoice:
    return VictimChoice(
        rule,
        tuple(entry.job for entry in found if entry.victim),
        tuple(entry.job for entry in found if not entry.victim),
    )


def _claim_of(entries: Iterable[_Entry], preemptor: Job) -> Claim:
    taken = _Taken(preemptor)
    for entry in entries:
        taken.add(entry)
    return taken.claim()


def _search(
    usage: Usage,
    preemptor: Job,
    ranked: Iterable[_Entry],
    everyone: Claim | None,
    *,
    within_own_limit: bool,
) -> list[_Entry] | None:
    """Take candidates (``ranked``: in victim order) until the preemptor fits, then minimize; None if it
    never fits. ``everyone``, what taking them all frees, when given, answers a hopeless search at once."""
    share_name, unit = preemptor.share_name, preemptor.unit

    def fits_with(claim: Claim) -> bool:
        return usage.fits(share_name, unit, preemptor.count, claim, within_own_limit=within_own_limit)

    if everyone is not None and (not everyone.physical or not fits_with(everyone)):
        return None  # taking every candidate would not do: no subset will (fit only grows with a claim)
    # Until enough is taken to fit physically, the full fit rule need not be asked.
    short = usage.occupancy.get(unit, 0) + preemptor.count - usage.capacity(unit)
    taken = _Taken(preemptor)
    for entry in ranked:
        if entry.victim and _protected(usage, entry.job, share_name, taken.leaving):
            continue
        taken.add(entry)
        if taken.physical >= short and fits_with(taken.claim()):
            return taken.minimized(fits_with)
    return None


class _Taken:
    """The candidates taken so far and what taking them gives, kept up to date as they change."""

    def __init__(self, preemptor: Job) -> None:
        self.share_name = preemptor.request.quota_share_name
        self.count = preemptor.request.instance_count
        self.entries: list[_Entry] = []
        self.leaving: dict[str, int] = defaultdict(int)
        self.physical = 0
        self.victim_units = 0
        self.own_victim_units = 0
        self.own_spare_units = 0

    def add(self, entry: _Entry) -> None:
        self._count(entry, +1)
        self.entries.append(entry)

    def claim(self) -> Claim:
        return Claim(self._own_given(), self.physical, self.leaving)

    def minimized(self, fits_with: Callable[[Claim], bool]) -> list[_Entry]:
        """Walk from the last candidate to the first, dropping each one the preemptor can do without."""
        for entry in reversed(list(self.entries)):
            self._count(entry, -1)
            if len(self.entries) > 1 and fits_with(self.claim()):
                self.entries.remove(entry)
            else:
                self._count(entry, +1)
        return self.entries

    def _own_given(self) -> int:
        """Of the preemptor's units, those its own share's jobs being stopped will give it, split as
        ``usage.split_claim`` splits them: its victims' units first (its own share's first), then spare
        units (its own share's first). Its share counts those once."""
        from_own_victims = min(self.count, self.own_victim_units)
        after_victims = max(0, self.count - self.victim_units)
        return from_own_victims + min(after_victims, self.own_spare_units)

    def _count(self, entry: _Entry, sign: int) -> None:
        units = sign * entry.units
        own = entry.job.request.quota_share_name == self.share_name
        self.physical += units
        if entry.victim:
            self.victim_units += units
            self.own_victim_units += units if own else 0
            self.leaving[entry.job.request.quota_share_name] += units
        elif own:
            self.own_spare_units += units


def _protected(usage: Usage, candidate: Job, preemptor_share: str, leaving: Mapping[str, int]) -> bool:
    """A job of another share is safe once its share, after the stops under way and the victims taken,
    is within its limit."""
    if candidate.share_name == preemptor_share:
        return False
    share = usage.shares.get(candidate.share_name)
    own = share.own_limit(candidate.unit) if share else 0
    remaining = usage.future(candidate.share_name, candidate.unit) - leaving.get(candidate.share_name, 0)
    return remaining <= own
