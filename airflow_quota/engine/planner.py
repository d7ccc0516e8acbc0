"""One allocation cycle: a pure function from a queue's state to the grants and preemptions it calls for.

Decisions are made one after another on a state updated after each (a job granted a moment ago is a
possible victim of the next decision):

1. Preemptors whose victims have all stopped get the capacity they reserved.
2. Jobs that fit within their share's own limit, each share in its own order (priority descending,
   then submission order), are granted, or reclaim what their share lent.
3. The remaining jobs, which would borrow, merged across shares by submission order, are granted
   idle capacity or preempt strictly lower-priority jobs of their own share.

A job that cannot start does not stop later jobs of its share. Every RUNNABLE job leaves the cycle with
a statusReason that says what it waits for. Same state in, same decisions out.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace

from airflow_quota.engine.model import (
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
)
from airflow_quota.engine.usage import Usage
from airflow_quota.engine.victims import VictimChoice, choose_victims


def share_order_key(job: Job) -> tuple[int, OrderKey, str]:
    """Within a share: priority descending, then submission order (a requeued job keeps its place)."""
    return (-job.priority, job.submitted, job.job_id)


def plan_cycle(state: QueueState, now: float) -> CyclePlan:
    """Run one allocation cycle at time ``now`` and return its decisions and the resulting state."""
    cycle = _Cycle(state, now)
    cycle.grant_ready_reservations()
    deferred = cycle.admit_within_own_limits()
    cycle.admit_borrowers(deferred)
    return cycle.finish()


class _Cycle:
    """The working state of one cycle: a private copy of the jobs and exact usage counters."""

    def __init__(self, state: QueueState, now: float) -> None:
        self.queue = state.queue
        self.now = now
        self.jobs: dict[str, Job] = dict(state.jobs)
        self.usage = Usage(self.queue, self.jobs.values())
        self.decisions: list[Decision] = []
        #: RUNNABLE jobs: those waiting to start, and preemptors holding a reservation.
        self.waiting: list[Job] = []
        self.reserved: list[Job] = []
        #: Per unit and share, the jobs that could be stopped: holding capacity and not being stopped.
        self.running: dict[str, dict[str, dict[str, Job]]] = defaultdict(lambda: defaultdict(dict))
        #: Per unit, jobs being stopped whose preemptor is gone: free to take over.
        self.orphans: dict[str, dict[str, Job]] = defaultdict(dict)
        self.next_start_seq = 1
        for job in self.jobs.values():
            if job.status is JobStatus.RUNNABLE:
                (self.reserved if job.awaiting_victims else self.waiting).append(job)
            elif job.status.holds_capacity:
                if job.started and job.started[1] >= self.next_start_seq:
                    self.next_start_seq = job.started[1] + 1
                if not job.is_stopping:
                    self.running[job.unit][job.share_name][job.job_id] = job
                elif job.job_id in self.usage.orphan_ids:
                    self.orphans[job.unit][job.job_id] = job
        #: Per unit and share, failed (count, priority) attempts since the last decision on that unit: a
        #: job of the same share needing at least as much with no higher priority cannot succeed either.
        self.failures: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(lambda: defaultdict(list))
        self.misconfigurations: dict[tuple[str, str, int], str | None] = {}

    # -- the three steps -----------------------------------------------------------------------------

    def grant_ready_reservations(self) -> None:
        """Step 1: a preemptor whose victims have all stopped gets what it reserved, once the queue
        physically has it: its capacity may have been lowered since the preemption."""
        for job in sorted(self.reserved, key=lambda job: (job.submitted, job.job_id)):
            if not self._stopping_victims(job) and not self._overdrawn(job.unit):
                self._grant(job)

    def admit_within_own_limits(self) -> dict[str, list[Job]]:
        """Step 2; returns, per share and in share order, the jobs left for step 3."""
        queues = self._waiting_jobs_by_share()
        deferred: dict[str, list[Job]] = {}
        for share_name in sorted(queues):
            share = self.usage.shares[share_name]
            left: list[Job] = []
            usage, own_limits = self.usage.share_usage, share.capacity_limits
            for job in queues[share_name]:
                unit, count = job.request.capacity_unit, job.request.instance_count
                if usage.get((share_name, unit), 0) + count <= own_limits.get(unit, 0):
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
            _, _, share_name, index = heapq.heappop(heads)
            jobs = deferred[share_name]
            self._admit(jobs[index])
            if index + 1 < len(jobs):
                following = jobs[index + 1]
                heapq.heappush(heads, (following.submitted, following.job_id, share_name, index + 1))

    def finish(self) -> CyclePlan:
        reasons: dict[tuple[str, str, int], str] = {}
        for job_id in [job.job_id for job in self.reserved + self.waiting]:
            job = self.jobs[job_id]
            if job.status is not JobStatus.RUNNABLE:
                continue
            stopping = self._stopping_victims(job) if job.awaiting_victims else []
            if stopping:
                reason = awaiting_victims_reason(stopping)
            elif job.awaiting_victims:
                reason = capacity_lowered_reason(
                    job, self.usage.capacity(job.unit), self.usage.occupancy.get(job.unit, 0)
                )
            else:
                key = (job.share_name, job.unit, job.count)
                if key not in reasons:
                    reasons[key] = self._misconfiguration(job) or waiting_reason(
                        self.usage, self.usage.shares[job.share_name], job
                    )
                reason = reasons[key]
            if reason != job.status_reason:
                self.jobs[job_id] = job.with_reason(reason)
        return CyclePlan(tuple(self.decisions), QueueState(self.queue, self.jobs))

    # -- one job -------------------------------------------------------------------------------------

    def _waiting_jobs_by_share(self) -> dict[str, list[Job]]:
        by_share: dict[str, list[Job]] = defaultdict(list)
        for job in self.waiting:
            if self._misconfiguration(job) is None:
                by_share[job.share_name].append(job)
        for jobs in by_share.values():
            jobs.sort(key=share_order_key)
        return by_share

    def _misconfiguration(self, job: Job) -> str | None:
        key = (job.share_name, job.unit, job.count)
        if key not in self.misconfigurations:
            share = self.usage.shares.get(job.share_name)
            self.misconfigurations[key] = never_fits_reason(
                self.queue, share, job.unit, job.count, self.usage.totals
            )
        return self.misconfigurations[key]

    def _admit(self, job: Job) -> None:
        """Grant ``job`` idle capacity, or preempt for it, or leave it waiting."""
        request = job.request
        failures = self.failures[request.capacity_unit][request.quota_share_name]
        count, priority = request.instance_count, request.scheduling_priority
        if any(
            failed_count <= count and failed_priority >= priority
            for failed_count, failed_priority in failures
        ):
            return
        if self.usage.fits(request.quota_share_name, request.capacity_unit, count):
            self._grant(job)
            return
        orphans = tuple(self.orphans[job.unit].values())
        choice = choose_victims(self.usage, job, self.running[job.unit], orphans)
        if choice is None:
            failures.append((count, priority))
        else:
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
        self.running[job.unit][job.share_name][job.job_id] = granted
        self._decided(Grant(job.job_id, job.unit, job.count, borrowed), {job.share_name}, pool_grew=False)

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
            self.running[victim.unit][victim.share_name].pop(victim.job_id, None)
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
