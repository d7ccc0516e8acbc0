"""The input of one allocation cycle, grouped and ordered once: who waits, who reserves, who holds.

A cycle reads its state's jobs once, in the state's order. The waiting ones (RUNNABLE, not holding a
reservation) are grouped by share, capacity unit and size, the groups whose jobs can never start get
their AWS misconfiguration code, and the others' jobs are put in share order (priority descending, then
submission order): without a sort when they come in submission order, as the allocator and the simulator
keep them.
"""

from __future__ import annotations

from collections import defaultdict
from operator import attrgetter

from airflow_quota.engine.model import HOLDING_CAPACITY, Job, JobStatus, OrderKey, QueueState
from airflow_quota.engine.reasons import StartableLimits, misconfiguration, startable_limits
from airflow_quota.engine.usage import UnitTotals

#: What jobs of one share, capacity unit and size have in common: their misconfiguration and statusReason.
GroupKey = tuple[str, str, int]

#: A job's submission key, then its job id: the order of a merge by submission.
SUBMISSION = attrgetter("submitted", "job_id")
_SUBMITTED = attrgetter("submitted")
_PRIORITY = attrgetter("request.scheduling_priority")


class Queued:
    """The cycle's input, grouped and ordered once: who waits (by share, unit and size; per share in share
    order), who reserves, who holds."""

    def __init__(self, state: QueueState) -> None:
        self.state = state
        queue = state.queue
        shares = {share.name: share for share in queue.shares}
        totals = UnitTotals.of(queue)
        #: Preemptors holding a reservation (by submission); the jobs holding capacity.
        self.reserved: list[Job] = []
        self.holding: list[Job] = []
        #: The RUNNABLE jobs waiting to start, in the state's order (nearly always their order in memory),
        #: and each one's group (share, unit and size) by its place in ``misconfigurations``: ``finish``
        #: reads them in this order.
        self.waiting: list[Job] = []
        self.group_of: list[int] = []
        #: Per group, in the order of their first jobs: the AWS misconfiguration code when such a job can
        #: never start.
        self.misconfigurations: dict[GroupKey, str | None] = {}
        #: Per share, its waiting jobs that can start some day, in share order ...
        self.by_share: dict[str, list[Job]] = defaultdict(list)
        #: ... and the smallest of them per unit.
        self.smallest: dict[str, dict[str, int]] = defaultdict(dict)
        # Per share, unit and size (a group): its share's jobs by priority (None when they can never
        # start) and its place. Jobs come in the state's order, which is nearly always submission order
        # (the allocator and the simulator keep it so): each priority's list is then in share order as
        # it is filled, and a share's list is its priority lists joined, highest first (no sort).
        lists: dict[str, dict[str, dict[int, tuple[dict[int, list[Job]] | None, int]]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        by_priority: dict[str, dict[int, list[Job]]] = defaultdict(lambda: defaultdict(list))
        limits: dict[tuple[str, str], StartableLimits] = {}
        runnable = JobStatus.RUNNABLE
        in_order = True
        last: OrderKey = (float("-inf"), 0)
        last_job: Job | None = None
        add_waiting, add_group_of = self.waiting.append, self.group_of.append
        for job in state.jobs.values():
            status = job.status
            if status is runnable:
                if job.awaiting_victims:
                    self.reserved.append(job)
                    continue
                submitted = job.submitted
                if in_order and submitted <= last:
                    # (Before the first job, a key at minus infinity: sorted below, to be safe.)
                    in_order = last_job is not None and submitted == last and job.job_id > last_job.job_id
                last, last_job = submitted, job
                # (Attribute reads in Python, specialized for slots, cost a fifth of an attrgetter's.)
                request = job.request
                # (By share, then unit, then size: three look-ups cost less than building a key.)
                by_size = lists[request.quota_share_name][request.capacity_unit]
                found = by_size.get(request.instance_count)
                if found is None:
                    key = (request.quota_share_name, request.capacity_unit, request.instance_count)
                    share_name, unit = where = key[:2]
                    share_limits = limits.get(where)
                    if share_limits is None:
                        share = shares.get(share_name)
                        share_limits = limits[where] = startable_limits(queue, share, unit, totals)
                    never = self.misconfigurations[key] = misconfiguration(share_limits, key[2])
                    startable = by_priority[share_name] if never is None else None
                    found = by_size[key[2]] = startable, len(self.misconfigurations) - 1
                startable, place = found
                add_waiting(job)
                add_group_of(place)
                if startable is not None:
                    startable[request.scheduling_priority].append(job)
            elif status in HOLDING_CAPACITY:
                self.holding.append(job)
        self.reserved.sort(key=SUBMISSION)
        for (share_name, unit, count), never in self.misconfigurations.items():
            if never is None:
                smallest = self.smallest[share_name]
                if count < smallest.get(unit, count + 1):
                    smallest[unit] = count
        by_share = self.by_share
        for share_name, priorities in by_priority.items():
            if len(priorities) == 1:
                (jobs,) = priorities.values()
            else:
                jobs = []
                for priority in sorted(priorities, reverse=True):
                    jobs += priorities[priority]
            if not in_order:
                # share_order_key as sorts with keys computed in C, each stable (reverse too), on the
                # priority lists joined. The first needs the job id only where two jobs have one
                # submission key.
                jobs.sort(key=_SUBMITTED)
                if len(set(map(_SUBMITTED, jobs))) < len(jobs):
                    jobs.sort(key=SUBMISSION)
                jobs.sort(key=_PRIORITY, reverse=True)
            by_share[share_name] = jobs
