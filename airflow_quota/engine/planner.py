"""One allocation cycle: a pure function from a queue's state to the grants and preemptions it calls for.

Decisions are made one after another on a state updated after each:

1. Preemptors whose victims have all stopped get the capacity they reserved.
2. Jobs that fit within their share's own limit, each share in its own order (priority descending,
   then submission order), are granted, or reclaim what their share lent.
3. The remaining jobs, which would borrow, merged across shares by submission order, are granted
   idle capacity or preempt strictly lower-priority jobs of their own share.

A job that cannot start does not stop later jobs of its share. Every RUNNABLE job leaves the cycle with
a statusReason that says what it waits for. Same state in, same decisions out.

A cycle never preempts a job it granted. When a later decision would need the units of a job granted
earlier in the same cycle, that grant is taken back before anyone hears of it: the job keeps waiting (its
statusReason names the job that needed its units), its units count as held until that decision, which is
then made again with them free. A preemptor granted its reservation in step 1 is never a victim in that
cycle (taking its grant back would free nothing: its units are promised to it).

The waiting jobs are sorted and grouped once per cycle (``_Queued``); a job's turn then costs a few
dictionary look-ups unless it can start or preempt, and jobs of one share, unit and size share one
statusReason.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace
from operator import attrgetter

from airflow_quota.engine.model import (
    HOLDING_CAPACITY,
    CyclePlan,
    Decision,
    Grant,
    Job,
    JobStatus,
    OrderKey,
    Preemption,
    QueueState,
    StopCause,
)
from airflow_quota.engine.reasons import (
    awaiting_victims_reason,
    capacity_lowered_reason,
    never_fits_reason,
    waiting_reason,
    withheld_reason,
)
from airflow_quota.engine.usage import UnitTotals, Usage
from airflow_quota.engine.victims import Candidates, VictimChoice, choose_victims

#: What jobs of one share, capacity unit and size have in common: their misconfiguration and statusReason.
GroupKey = tuple[str, str, int]


def share_order_key(job: Job) -> tuple[int, OrderKey, str]:
    """Within a share: priority descending, then submission order (a requeued job keeps its place)."""
    return (-job.priority, job.submitted, job.job_id)


def plan_cycle(state: QueueState, now: float) -> CyclePlan:
    """Run one allocation cycle at time ``now`` and return its decisions and the resulting state."""
    cycle = _Cycle(_Queued(state), now)
    cycle.grant_ready_reservations()
    deferred = cycle.admit_within_own_limits()
    cycle.admit_borrowers(deferred)
    return cycle.finish()


class _Queued:
    """The cycle's input, sorted and grouped once: who waits (in share order), who reserves, who holds."""

    def __init__(self, state: QueueState) -> None:
        self.state = state
        queue = state.queue
        #: RUNNABLE jobs waiting to start (all shares, in share order), preemptors holding a reservation
        #: (by submission), and the jobs holding capacity.
        self.waiting: list[Job] = []
        self.reserved: list[Job] = []
        self.holding: list[Job] = []
        for job in state.jobs.values():
            status = job.status
            if status is JobStatus.RUNNABLE:
                (self.reserved if job.awaiting_victims else self.waiting).append(job)
            elif status in HOLDING_CAPACITY:
                self.holding.append(job)
        self.reserved.sort(key=attrgetter("submitted", "job_id"))
        # share_order_key as two sorts with keys computed in C: the second is stable, and so is reverse.
        self.waiting.sort(key=attrgetter("submitted", "job_id"))
        self.waiting.sort(key=attrgetter("request.scheduling_priority"), reverse=True)

        shares = {share.name: share for share in queue.shares}
        totals = UnitTotals.of(queue)
        #: Per (share, unit, size): the AWS misconfiguration code when such a job can never start.
        self.misconfigurations: dict[GroupKey, str | None] = {}
        #: Each waiting job's group, in the order of ``waiting``.
        self.groups: list[GroupKey] = []
        #: Per share, its waiting jobs that can start some day, in share order.
        self.by_share: dict[str, list[Job]] = defaultdict(list)
        misconfigurations = self.misconfigurations
        for job in self.waiting:
            request = job.request
            group = (request.quota_share_name, request.capacity_unit, request.instance_count)
            self.groups.append(group)
            if group not in misconfigurations:
                misconfigurations[group] = never_fits_reason(
                    queue, shares.get(group[0]), group[1], group[2], totals
                )
            if misconfigurations[group] is None:
                self.by_share[group[0]].append(job)


class _Cycle:
    """The working state of one cycle: a private copy of the jobs and exact usage counters."""

    def __init__(self, queued: _Queued, now: float) -> None:
        self.queued = queued
        #: Jobs granted in this cycle that a later decision could take (their grant is taken back then).
        self.granted_now: set[str] = set()
        #: Jobs whose grant a later decision of this cycle needed, with the job that needed it.
        self.withheld: dict[str, str] = {}
        self.queue = queued.state.queue
        self.now = now
        self.jobs: dict[str, Job] = dict(queued.state.jobs)
        self.usage = Usage(self.queue, [*queued.holding, *queued.reserved])
        self.decisions: list[Decision] = []
        #: The jobs that could be stopped: holding capacity and not being stopped (and not granted their
        #: reservation in this cycle).
        self.running = Candidates()
        #: Per unit, jobs being stopped whose preemptor is gone: free to take over.
        self.orphans: dict[str, dict[str, Job]] = defaultdict(dict)
        self.next_start_seq = 1
        for job in queued.holding:
            if job.started and job.started[1] >= self.next_start_seq:
                self.next_start_seq = job.started[1] + 1
            if not job.is_stopping:
                self.running.add(job)
            elif job.job_id in self.usage.orphan_ids:
                self.orphans[job.unit][job.job_id] = job
        #: Per unit and share, failed (count, priority) attempts since the last decision on that unit: a
        #: job of the same share needing at least as much with no higher priority cannot succeed either.
        self.failures: dict[str, dict[str, list[tuple[int, int]]]] = {}

    # -- the three steps -----------------------------------------------------------------------------

    def grant_ready_reservations(self) -> None:
        """Step 1: a preemptor whose victims have all stopped gets what it reserved, once the queue
        physically has it: its capacity may have been lowered since the preemption."""
        for job in self.queued.reserved:
            if not self._stopping_victims(job) and not self._overdrawn(job.unit):
                self._grant(job)

    def admit_within_own_limits(self) -> dict[str, list[Job]]:
        """Step 2; returns, per share and in share order, the jobs left for step 3."""
        deferred: dict[str, list[Job]] = {}
        usage = self.usage.share_usage
        for share_name, jobs in sorted(self.queued.by_share.items()):
            own_limits = self.usage.shares[share_name].capacity_limits
            left: list[Job] = []
            for job in jobs:
                request = job.request
                unit = request.capacity_unit
                if usage.get((share_name, unit), 0) + request.instance_count <= own_limits.get(unit, 0):
                    self._admit(job)
                else:
                    left.append(job)
            deferred[share_name] = left
        return deferred

    def admit_borrowers(self, deferred: dict[str, list[Job]]) -> None:
        """Step 3: merge the shares' remaining queues by submission order of their heads."""
        heads: list[tuple[OrderKey, str, str, int]] = []
        for share_name, jobs in deferred.items():
            if jobs:
                heads.append((jobs[0].submitted, jobs[0].job_id, share_name, 0))
        heapq.heapify(heads)
        while heads:
            _, _, share_name, index = heads[0]
            jobs = deferred[share_name]
            self._admit(jobs[index])
            index += 1
            if index < len(jobs):
                following = jobs[index]
                heapq.heapreplace(heads, (following.submitted, following.job_id, share_name, index))
            else:
                heapq.heappop(heads)

    def finish(self) -> CyclePlan:
        jobs, queued = self.jobs, self.queued
        for job in queued.reserved:
            self._explain_reserved(jobs[job.job_id])
        reasons: dict[GroupKey, str] = {}
        misconfigurations = queued.misconfigurations
        for job, group in zip(queued.waiting, queued.groups, strict=True):
            job_id = job.job_id
            current = jobs[job_id]
            if current is not job:  # granted, or preempting: decided in this cycle
                if current.status is JobStatus.RUNNABLE:
                    self._explain_reserved(current)
                continue
            if job_id in self.withheld:
                reason = withheld_reason(self.withheld[job_id], job)
            elif group in reasons:
                reason = reasons[group]
            else:
                reason = reasons[group] = misconfigurations[group] or waiting_reason(
                    self.usage, self.usage.shares[group[0]], job
                )
            if reason != job.status_reason:
                jobs[job_id] = job.with_reason(reason)
        return CyclePlan(tuple(self.decisions), QueueState(self.queue, jobs))

    def _explain_reserved(self, job: Job) -> None:
        """The statusReason of a RUNNABLE preemptor: the victims it waits for, or why it still waits."""
        if job.status is not JobStatus.RUNNABLE:
            return
        stopping = self._stopping_victims(job)
        if stopping:
            reason = awaiting_victims_reason(stopping)
        else:
            reason = capacity_lowered_reason(
                job, self.usage.capacity(job.unit), self.usage.occupancy.get(job.unit, 0)
            )
        if reason != job.status_reason:
            self.jobs[job.job_id] = job.with_reason(reason)

    # -- one job -------------------------------------------------------------------------------------

    def _admit(self, job: Job) -> None:
        """Grant ``job`` idle capacity, or preempt for it, or leave it waiting."""
        request = job.request
        unit, share_name = request.capacity_unit, request.quota_share_name
        count, priority = request.instance_count, request.scheduling_priority
        failed_on_unit = self.failures.get(unit)
        failed = failed_on_unit.get(share_name) if failed_on_unit else None
        if failed:
            for failed_count, failed_priority in failed:
                if failed_count <= count and failed_priority >= priority:
                    return
        if self.usage.fits(share_name, unit, count):
            self._grant(job)
            return
        orphans = tuple(self.orphans[unit].values())
        choice = choose_victims(self.usage, job, self.running, orphans)
        if choice is None:
            self.failures.setdefault(unit, {}).setdefault(share_name, []).append((count, priority))
            return
        granted_now = [victim for victim in choice.victims if victim.job_id in self.granted_now]
        if granted_now:
            self._take_back(granted_now, job.job_id)
            self._admit(job)  # again, with their units free
            return
        self._preempt(job, choice)

    def _overdrawn(self, unit: str) -> bool:
        """Whether more of ``unit`` is held and reserved than the queue has (its capacity was lowered)."""
        return self.usage.occupancy.get(unit, 0) > self.usage.capacity(unit)

    def _stopping_victims(self, preemptor: Job) -> list[str]:
        return [
            job_id
            for job_id in preemptor.awaiting_victims
            if (victim := self.jobs.get(job_id)) is not None
            and victim.is_stopping
            and victim.status.holds_capacity
            and victim.preempted_by == preemptor.job_id
        ]

    # -- applying decisions ----------------------------------------------------------------------------

    def _decided(self, decision: Decision, shares_changed: set[str], pool_grew: bool) -> None:
        """Record ``decision`` and forget the failed searches it may have made possible.

        A decision takes idle capacity and candidates away, so failed searches stay failed, except for
        the shares whose usage it changed; and for every share when it leaves a share borrowing (a new
        reclaim candidate) or makes the lending pool grow (less borrowed, or more lent).
        """
        self.decisions.append(decision)
        unit = decision.capacity_unit
        if pool_grew or self.usage.borrowing[unit] & shares_changed:
            self.failures.pop(unit, None)
            return
        failures = self.failures.get(unit, {})
        for share_name in shares_changed:
            failures.pop(share_name, None)

    def _grant(self, job: Job) -> None:
        share = self.usage.shares[job.share_name]
        if not job.holds_reservation:
            self.usage.add_to_share(job.share_name, job.unit, job.count)
            self.usage.add_occupancy(job.unit, job.count)
        used_after = self.usage.usage(job.share_name, job.unit)
        borrowed = max(0, min(job.count, used_after - share.own_limit(job.unit)))
        granted = replace(
            job,
            status=JobStatus.SCHEDULED,
            status_reason="",
            started=(self.now, self.next_start_seq),
            awaiting_victims=frozenset(),
        )
        self.next_start_seq += 1
        self.jobs[job.job_id] = granted
        if not job.holds_reservation:
            self.running.add(granted)
            self.granted_now.add(job.job_id)
        self._decided(Grant(job.job_id, job.unit, job.count, borrowed), {job.share_name}, pool_grew=False)

    def _take_back(self, granted: list[Job], needed_by: str) -> None:
        """Withdraw grants of this cycle, not yet emitted, whose units ``needed_by`` needs: the jobs wait
        again, as they came into the cycle."""
        taken_back = {job.job_id for job in granted}
        self.decisions = [
            decision
            for decision in self.decisions
            if not (isinstance(decision, Grant) and decision.job_id in taken_back)
        ]
        for job in granted:
            self.running.remove(job)
            self.granted_now.discard(job.job_id)
            self.usage.add_to_share(job.share_name, job.unit, -job.count)
            self.usage.add_occupancy(job.unit, -job.count)
            self.jobs[job.job_id] = self.queued.state.jobs[job.job_id]
            self.withheld[job.job_id] = needed_by
            self.failures.pop(job.unit, None)  # room came back on the unit

    def _preempt(self, preemptor: Job, choice: VictimChoice) -> None:
        overdraft_before = self.usage.overdraft(preemptor.unit)
        held_by_victims = 0
        for victim in choice.victims:
            held_by_victims += victim.count
            if victim.counts_in_share:
                self.usage.add_to_share(victim.share_name, victim.unit, -victim.count)
            self.usage.orphan_ids.discard(victim.job_id)
            reason = victim.status_reason
            if victim.stop_cause is not StopCause.TERMINATED:
                reason = f"Being stopped: preempted by {preemptor.job_id} ({choice.rule})"
            self.jobs[victim.job_id] = replace(
                victim,
                stop_cause=victim.stop_cause or StopCause.PREEMPTED,
                preempted_by=preemptor.job_id,
                status_reason=reason,
            )
            self.running.remove(victim)
            self.orphans[victim.unit].pop(victim.job_id, None)
        self.usage.add_to_share(preemptor.share_name, preemptor.unit, preemptor.count)
        self.usage.add_occupancy(preemptor.unit, max(0, preemptor.count - held_by_victims))
        victim_ids = tuple(victim.job_id for victim in choice.victims)
        self.jobs[preemptor.job_id] = replace(preemptor, awaiting_victims=frozenset(victim_ids))
        changed = {preemptor.share_name} | {victim.share_name for victim in choice.victims}
        pool_grew = self.usage.overdraft(preemptor.unit) < overdraft_before
        self._decided(
            Preemption(preemptor.job_id, victim_ids, choice.rule, preemptor.unit), changed, pool_grew
        )
