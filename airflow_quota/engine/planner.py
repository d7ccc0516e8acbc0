"""One allocation cycle: a pure function from a queue's state to the grants and preemptions it calls for.

Decisions are made one after another on a state updated after each:

1. Reservations no stop under way gives units any more (a preemptor whose victims have stopped, a job
   promised spare units of a stop that has ended) get the capacity they reserved.
2. Jobs that fit within their share's own limit, each share in its own order (priority descending,
   then submission order), are granted, promised spare units of stops under way, or reclaim what their
   share lent. A job of the share that would have to borrow, and could start now, stops the later jobs
   of its share on its unit here: they follow it in step 3 (priority order inside a share).
3. The remaining jobs, merged across shares by submission order, are granted idle capacity, promised
   spare units of stops under way, or preempt strictly lower-priority jobs of their own share.

Whichever the step, a job is granted idle capacity when it fits; else it is promised spare units of stops
under way when they (with idle capacity) let it fit, and preempts nobody; else it may preempt. A later job
of a share starts before an earlier one only when the earlier one cannot start now. Every RUNNABLE job
leaves the cycle with a statusReason that says what it waits for. Same state in, same decisions out.

A cycle never preempts a job it granted. When a later decision would need the units of a job granted
earlier in the same cycle, that grant is taken back before anyone hears of it: the job keeps waiting (its
statusReason names the job that needed its units), its units count as held until that decision, which is
then made again with them free. A preemptor granted its reservation in step 1 is never a victim in that
cycle (taking its grant back would free nothing: its units are promised to it).

What a cycle costs follows the jobs it can act on. The waiting jobs are grouped by share, unit and size
once per cycle, and put in share order without a sort when they come in submission order, as the
allocator and the simulator keep them (``Queued``, engine/queued.py); a share with no room within its own
limits passes all its jobs to step 3 at once, a share that can neither borrow nor preempt is left out of
step 3, a share whose later jobs failed searches all rule out leaves step 3's merge until a decision
forgets one of them (``_Sleeping``), and a job's turn costs a few dictionary look-ups unless it can start
or preempt. Jobs of one group share one statusReason (a job behind others of its share adds their number
and the first of them), which the plan keeps beside the jobs (``CyclePlan.status_reasons``) instead of
copying each job.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable
from itertools import accumulate, compress, islice
from operator import attrgetter, ne

from airflow_quota.engine.extensions import VictimPolicy, is_starving
from airflow_quota.engine.model import (
    CyclePlan,
    Decision,
    Grant,
    Job,
    JobStatus,
    OrderKey,
    Preemption,
    Promise,
    QueueState,
    StopCause,
    decided_job,
)
from airflow_quota.engine.queued import SUBMISSION, GroupKey, Queued
from airflow_quota.engine.reasons import (
    EXACT_PLACES,
    WaitingReasons,
    awaiting_victims_reason,
    behind_text,
    capacity_lowered_reason,
    checkpoint_wait_reason,
    held_for_starving_reason,
    minimum_run_reason,
    starving_reason,
    withheld_reason,
)
from airflow_quota.engine.usage import Usage, split_claim
from airflow_quota.engine.victims import Candidates, VictimChoice, choose_victims, claim_spare, spare_order


def share_order_key(job: Job) -> tuple[int, OrderKey, str]:
    """Within a share: priority descending, then submission order (a requeued job keeps its place)."""
    return (-job.priority, job.submitted, job.job_id)


def plan_cycle(state: QueueState, now: float) -> CyclePlan:
    """Run one allocation cycle at time ``now`` and return its decisions and the resulting state."""
    cycle = _Cycle(Queued(state), now)
    cycle.grant_ready_reservations()
    deferred = cycle.admit_within_own_limits()
    cycle.admit_borrowers(deferred)
    return cycle.finish()


_JOB_ID = attrgetter("job_id")
#: From this many jobs left in a share's turn of step 2 on, a failed search looks whether it rules out all
#: of them (below, looking costs more than it saves).
_MANY_LEFT = 32
_STATUS_REASON = attrgetter("status_reason")


class _Cycle:
    """The working state of one cycle: a private copy of the jobs and exact usage counters."""

    def __init__(self, queued: Queued, now: float) -> None:
        self.queued = queued
        #: Jobs granted in this cycle that a later decision could take (their grant is taken back then).
        self.granted_now: set[str] = set()
        #: Jobs whose grant a later decision of this cycle needed, with the job that needed it.
        self.withheld: dict[str, str] = {}
        self.queue = queued.state.queue
        self.now = now
        #: The jobs as this cycle's decisions leave them: the input's own dictionary (never written)
        #: until the first decision, which copies it (``_set_job``): a cycle that decides nothing copies
        #: nothing.
        self.jobs: dict[str, Job] = queued.state.jobs
        self._copied = False
        #: The new statusReasons of RUNNABLE jobs, where they changed (the jobs themselves are not copied).
        self.status_reasons: dict[str, str] = {}
        self.usage = Usage(self.queue, [*queued.holding, *queued.reserved])
        self.decisions: list[Decision] = []
        #: How many times a decision was made or taken back in this cycle.
        self.changes = 0
        #: The jobs that could be stopped: holding capacity and not being stopped (and not granted their
        #: reservation in this cycle).
        self.running = Candidates.of(job for job in queued.holding if job.stop_cause is None)
        self.next_start_seq = 1
        for job in queued.holding:
            started = job.started
            if started and started[1] >= self.next_start_seq:
                self.next_start_seq = started[1] + 1
        #: Per unit and share, failed (count, priority) attempts since the last decision on that unit: a
        #: job of the same share needing at least as much with no higher priority cannot succeed either.
        self.failures: dict[str, dict[str, list[tuple[int, int]]]] = {}
        #: In step 3, the shares out of the merge while failed searches rule out all their jobs.
        self.sleeping: _Sleeping | None = None
        # Our extensions (engine/extensions.py); with none in use, a cycle runs as without them.
        #: The victim rules of the shares that use them (None: no share does).
        self.victim_policy = VictimPolicy.of(self.queue, now)
        #: Jobs that could preempt only once their victims have run their minimum run time, or have
        #: reached their next checkpoint: from when, and whether it is the checkpoint.
        self.not_before: dict[str, tuple[float, bool]] = {}
        #: Per share and unit, its starving front job, for which capacity is held while it waits.
        self.held_for = self._starving_fronts()
        self.held_shares = {share_name for share_name, _ in self.held_for}

    # -- the three steps -----------------------------------------------------------------------------

    def grant_ready_reservations(self) -> None:
        """Step 1: a reservation no stop under way gives units any more gets what it reserved, once the
        queue physically has it: its capacity may have been lowered since the preemption.

        First, in submission order, each reservation forgets the stops it awaited that have ended (one
        stopped, requeued and stopped again later is not awaited again). The units an ended stop gave it
        are taken again from the spare units of the stops it still awaits, where they have any (its own
        share's first): it waits for those anyway, and the units the ended stop freed go to others now
        (in a shrunk queue, a stop may free room without giving units). When no stop is left, it keeps
        them with 0 units each: it still holds its reservation, and they give it nothing any more."""
        reserved: list[Job] = []
        for job in self.queued.reserved:
            kept = self._still_awaited(job)
            if kept != job.awaiting_victims:
                job = job.reserving(kept)
                self._set_job(job)
                self.usage.rekeep(job)
            reserved.append(job)
        for job in reserved:
            if not self.usage.stops_giving(job.job_id) and not self._overdrawn(job.unit):
                self._grant(job)

    def _still_awaited(self, reservation: Job) -> dict[str, int]:
        """The stops ``reservation`` still awaits, and the units each gives it (step 1's docstring)."""
        jobs, awaited = self.jobs, reservation.awaiting_victims
        kept = {
            stop_id: units
            for stop_id, units in awaited.items()
            if (stop := jobs.get(stop_id)) is not None and stop.is_stopping and stop.status.holds_capacity
        }
        if not kept:
            return dict.fromkeys(awaited, 0)
        freed = sum(units for stop_id, units in awaited.items() if stop_id not in kept)
        share_name = reservation.request.quota_share_name
        for stop_id in sorted(kept, key=lambda each: jobs[each].request.quota_share_name != share_name):
            moved = min(freed, self.usage.spare_units.get(stop_id, 0))
            kept[stop_id] += moved
            freed -= moved
        return kept

    def admit_within_own_limits(self) -> dict[str, list[Job]]:
        """Step 2; returns, per share and in share order, the jobs left for step 3.

        A share's room within its own limits changes only by its own decisions during its turn: it is
        worked out per unit when the turn starts and after each decision, and a share with no room for
        its smallest waiting job on any unit passes all its (remaining) jobs on at once. A job beyond the
        room that could start now by borrowing or preempting passes the later jobs of its share on its
        unit on with it: they must not start before it (``_could_start_beyond_room``).
        """
        deferred: dict[str, list[Job]] = {}
        failures = self.failures
        for share_name, jobs in sorted(self.queued.by_share.items()):
            smallest = self.queued.smallest[share_name]
            room = self._room_within_own_limits(share_name, smallest)
            if not any(count <= room[unit] for unit, count in smallest.items()):
                deferred[share_name] = jobs
                continue
            left: list[Job] = []
            # The share's failed searches per unit: only ``_admit`` changes them (read again after it).
            share_failed = _failed_of(failures, share_name)
            #: The units on which an earlier job of the share, beyond its room, could start now.
            behind: set[str] = set()
            holds = share_name in self.held_shares
            for index, job in enumerate(jobs):
                request = job.request
                unit = request.capacity_unit
                if unit in behind or (holds and self._held_back(job)):
                    left.append(job)
                elif request.instance_count <= room[unit]:
                    failed = share_failed.get(unit)
                    if failed and _covered(failed, request.instance_count, request.scheduling_priority):
                        continue  # a failed search rules it out (``_admit`` would return at once)
                    changes = self.changes
                    self._admit(job)
                    share_failed = _failed_of(failures, share_name)
                    if changes != self.changes:
                        room = self._room_within_own_limits(share_name, smallest)
                        if not any(count <= room[unit] for unit, count in smallest.items()):
                            left.extend(jobs[index + 1 :])
                            break
                    elif (
                        not holds
                        and len(jobs) - index > _MANY_LEFT
                        and _all_ruled_out(room, smallest, share_failed, request.scheduling_priority)
                    ):
                        # A failed search rules out every later job that fits the room (none needs less
                        # than the smallest, none has a higher priority): those wait, the others go on to
                        # step 3, with no decision, search or Python call each.
                        left += [
                            later
                            for later in jobs[index + 1 :]
                            if later.request.instance_count > room[later.request.capacity_unit]
                        ]
                        break
                else:
                    left.append(job)
                    if self._could_start_beyond_room(job):
                        behind.add(unit)
            deferred[share_name] = left
        return deferred

    def _could_start_beyond_room(self, job: Job) -> bool:
        """Whether a job that does not fit within its share's own room could start now anyway: by
        borrowing idle capacity, or by preempting lower-priority jobs of its share."""
        request = job.request
        share = self.usage.shares[request.quota_share_name]
        if share.borrows and self.usage.fits(share.name, request.capacity_unit, request.instance_count):
            return True
        if share.in_share_preemption:
            own = self.running.of_share(request.capacity_unit, share.name)
            policy = self.victim_policy
            if policy is None or share.name not in policy.minimum_run:
                return bool(own) and own[0][1].request.scheduling_priority < request.scheduling_priority
            # Lowest priority first: the first of higher priority ends the look.
            for _, other in own:
                if other.request.scheduling_priority >= request.scheduling_priority:
                    break
                if policy.may_preempt(other):
                    return True
        return False

    # -- no starved job (engine/extensions.py) ----------------------------------------------------------

    def _starving_fronts(self) -> dict[tuple[str, str], Job]:
        """Per share with ``starvation_limit_seconds`` and unit, its front job (the first waiting in share
        order) when it has waited longer than that."""
        held: dict[tuple[str, str], Job] = {}
        for share in self.queue.shares:
            limit = share.starvation_limit_seconds
            jobs = self.queued.by_share.get(share.name) if limit is not None else None
            if not jobs:
                continue
            units = set(self.queued.smallest[share.name])
            for job in jobs:
                unit = job.request.capacity_unit
                if unit in units:
                    units.discard(unit)
                    if is_starving(job, limit, self.now):
                        held[(share.name, unit)] = job
                    if not units:
                        break
        return held

    def _held_back(self, job: Job) -> bool:
        """Whether ``job`` waits because its share's capacity on its unit is held for a starving job
        before it, which this cycle has not decided for yet."""
        front = self.held_for.get((job.request.quota_share_name, job.request.capacity_unit))
        return front is not None and front is not job and self.jobs[front.job_id] is front

    def _has_room(self, share_name: str) -> bool:
        """Whether the share's smallest waiting job fits within its own limit on some unit now."""
        smallest = self.queued.smallest[share_name]
        room = self._room_within_own_limits(share_name, smallest)
        return any(count <= room[unit] for unit, count in smallest.items())

    def _room_within_own_limits(self, share_name: str, units: Iterable[str]) -> dict[str, int]:
        """Per unit, the units the share may still take within its own limit (negative: above it),
        counting the spare units of its own jobs being stopped (a job it is promised them counts once)."""
        usage, own_limits = self.usage, self.usage.shares[share_name].capacity_limits
        return {
            unit: own_limits.get(unit, 0) - usage.usage(share_name, unit) + usage.own_spare(share_name, unit)
            for unit in units
        }

    def admit_borrowers(self, deferred: dict[str, list[Job]]) -> None:
        """Step 3: merge the shares' remaining queues by submission order of their heads.

        The share whose head comes first goes on, with no heap operation, while its next job comes before
        every other share's head (the heap's two children of its root). A share all of whose later jobs
        failed searches rule out leaves the heap until a decision forgets one of them (``_Sleeping``):
        its jobs in between would have been passed over one by one.
        """
        heads: list[tuple[OrderKey, str, str, int]] = []
        no_spare = not self.usage.has_spare()
        sleeping = self.sleeping = _Sleeping(self.queued.smallest)
        for share_name, jobs in deferred.items():
            share = self.usage.shares[share_name]
            if (
                no_spare
                and not share.borrows
                and not share.in_share_preemption
                and not self._has_room(share_name)
            ):
                # None of its jobs can start: they would pass its own limit (its ceiling), its usage can
                # only grow from here (no share takes from one that does not borrow, and no stop under
                # way has spare units to promise), and it has no victims to take. Leaving a whole share
                # out keeps the order of the others' jobs.
                continue
            if not jobs:
                continue
            if self._ruled_out(share_name, jobs[0].request.scheduling_priority):
                sleeping.add(share_name, 0, None)  # by failed searches of step 2
            else:
                heads.append((jobs[0].submitted, jobs[0].job_id, share_name, 0))
        heapq.heapify(heads)
        failures = self.failures
        held_for = self.held_for
        while heads:
            _, _, share_name, start = heads[0]
            jobs = deferred[share_name]
            end = len(jobs)
            others = heads[1:3]
            # The first other share's head (its submission key, then job id): the turn ends past it.
            bound_key, bound_id = min(others)[:2] if others else (None, "")
            index = start
            while True:
                job = jobs[index]
                # Most turns end here, on a failed search (``_admit`` asks again): no call for them.
                request = job.request
                failed_on_unit = failures.get(request.capacity_unit)
                failed = failed_on_unit.get(share_name) if failed_on_unit else None
                if held_for and self._held_back(job):
                    pass  # its share's capacity on its unit is held for a starving job before it
                elif not failed or not _covered(failed, request.instance_count, request.scheduling_priority):
                    changes = self.changes
                    self._admit(job)
                    if changes != self.changes:
                        if sleeping.woken:
                            # The shares woken come back where this job's turn has brought the merge:
                            # past every job of theirs before the greatest submission of the turn so far
                            # (its first job's, or a later one's: nothing of theirs came between).
                            passed = max(map(SUBMISSION, jobs[start : index + 1]))
                            for head in sleeping.wake(deferred, passed):
                                heapq.heappush(heads, head)
                                if bound_key is None or head[:2] < (bound_key, bound_id):
                                    bound_key, bound_id = head[:2]
                    elif index + 1 < end and self._ruled_out(
                        share_name, jobs[index + 1].request.scheduling_priority
                    ):
                        sleeping.add(share_name, index + 1, max(map(SUBMISSION, jobs[start : index + 1])))
                        heapq.heappop(heads)
                        break
                index += 1
                if index == end:
                    heapq.heappop(heads)
                    break
                if bound_key is None:
                    continue
                following = jobs[index]
                submitted = following.submitted
                if submitted > bound_key or (submitted == bound_key and following.job_id > bound_id):
                    heapq.heapreplace(heads, (submitted, following.job_id, share_name, index))
                    break
        self.sleeping = None

    def _ruled_out(self, share_name: str, priority: int) -> bool:
        """Whether failed searches rule out every waiting job of the share with no higher ``priority``
        (on each unit, one that needed no more than its smallest job and had no lower priority)."""
        failures = self.failures
        for unit, count in self.queued.smallest[share_name].items():
            failed_on_unit = failures.get(unit)
            failed = failed_on_unit.get(share_name) if failed_on_unit else None
            if not failed or not _covered(failed, count, priority):
                return False
        return True

    def finish(self) -> CyclePlan:
        """The plan: the decisions, the jobs they changed, and every waiting job's statusReason where it
        changed (beside the jobs: ``CyclePlan.status_reasons``).

        A group's reason is worked out once. A job with waiting jobs of its share on the same unit before
        it (in share order) adds how many and the first of them: the same words for every job from
        ``EXACT_PLACES`` on, so only the jobs at the front of each share and unit are looked at alone."""
        jobs, queued, withheld, held_for = self.jobs, self.queued, self.withheld, self.held_for
        for job in queued.reserved:
            self._explain_reserved(jobs[job.job_id])
        reasons = self.status_reasons
        waiting_reasons = WaitingReasons(self.usage, self._stopping_units())
        fronts = self._fronts()
        group_reasons: dict[GroupKey, str] = {}
        # Per share and unit with more jobs than its front: what every job behind the front adds.
        behind_front = {
            where: behind_text(EXACT_PLACES, front[0].job_id, where[0])
            for where, front in fronts.items()
            if len(front) == EXACT_PLACES
        }
        shares = self.usage.shares
        reason_of: list[str] = []  # (in the order of ``misconfigurations``)
        for group, reason in queued.misconfigurations.items():
            if reason is None:
                share_name, unit, count = group
                reason = group_reasons[group] = waiting_reasons.reason(shares[share_name], unit, count)
                starving = held_for.get((share_name, unit))
                if starving is not None and jobs[starving.job_id] is starving:
                    reason = held_for_starving_reason(starving)
                else:
                    reason += behind_front.get((share_name, unit), "")
            reason_of.append(reason)
        # Every waiting job's reason, its group's, compared with the one it has in C (no Python step per
        # job), in the state's order: the jobs are read in the order they lie in memory (group by group,
        # at 100,000 jobs, each read missed the processor's caches: x10 the time).
        waiting = queued.waiting
        new_reasons = list(map(reason_of.__getitem__, queued.group_of))
        differs = map(ne, new_reasons, map(_STATUS_REASON, waiting))
        reasons.update(compress(zip(map(_JOB_ID, waiting), new_reasons, strict=True), differs))
        # The jobs this cycle granted or let preempt have no waiting reason (a preemptor: the victims it
        # waits for); those whose grant was taken back name the job that needed their units.
        for decision in self.decisions:
            job_id = decided_job(decision)
            reasons.pop(job_id, None)
            current = jobs[job_id]
            if current.status is JobStatus.RUNNABLE:
                self._explain_reserved(current)
        before = queued.state.jobs
        for job_id, needed_by in withheld.items():
            job = before[job_id]
            if jobs[job_id] is not job:
                continue  # (never: a job whose grant was taken back is not looked at again)
            job_reason = withheld_reason(needed_by, job)
            if job_reason != job.status_reason:
                reasons[job_id] = job_reason
            else:
                reasons.pop(job_id, None)
        for (share_name, unit), front in fronts.items():
            first = front[0].job_id
            for ahead, job in enumerate(front):
                job_id = job.job_id
                if job_id in withheld:
                    continue  # its reason names the job that needed its units
                reason = group_reasons[(share_name, unit, job.request.instance_count)]
                if ahead:
                    starving = held_for.get((share_name, unit))
                    if starving is not None and jobs[starving.job_id] is starving:
                        reason = held_for_starving_reason(starving)
                    else:
                        reason += behind_text(ahead, first, share_name)
                if reason != job.status_reason:
                    reasons[job_id] = reason
                else:
                    reasons.pop(job_id, None)
        deferred: dict[str, float] = {}
        if self.not_before or held_for:
            deferred = self._explain_extensions(group_reasons, reasons)
        decided = QueueState(self.queue, jobs) if self._copied else queued.state
        return CyclePlan(tuple(self.decisions), decided, reasons, deferred)

    def _explain_extensions(
        self, group_reasons: dict[GroupKey, str], reasons: dict[str, str]
    ) -> dict[str, float]:
        """The reasons our extensions add: a starving job's, and a would-be preemptor's whose victims have
        not run their minimum run time yet or are to reach their next checkpoint first (its own reason,
        not its group's). Returns those would-be preemptors, with from when they may preempt."""
        jobs = self.jobs
        added: dict[str, str] = {}
        deferred: dict[str, float] = {}
        for (share_name, unit), front in self.held_for.items():
            if jobs[front.job_id] is front and front.job_id not in self.withheld:
                waiting = group_reasons[(share_name, unit, front.request.instance_count)]
                limit = self.usage.shares[share_name].starvation_limit_seconds or 0.0
                added[front.job_id] = starving_reason(waiting, limit)
        for job_id, (not_before, at_checkpoint) in self.not_before.items():
            job = jobs[job_id]
            if job.status is JobStatus.RUNNABLE and not job.awaiting_victims and job_id not in self.withheld:
                request = job.request
                key = (request.quota_share_name, request.capacity_unit, request.instance_count)
                explain = checkpoint_wait_reason if at_checkpoint else minimum_run_reason
                added[job_id] = explain(added.get(job_id, group_reasons[key]), not_before)
                deferred[job_id] = not_before
        for job_id, reason in added.items():
            if reason != jobs[job_id].status_reason:
                reasons[job_id] = reason
            else:
                reasons.pop(job_id, None)
        return deferred

    def _fronts(self) -> dict[tuple[str, str], list[Job]]:
        """Per share and unit, its first ``EXACT_PLACES`` jobs still waiting, in share order.

        A share's jobs are read in order only until every unit's front is as long as it can be."""
        queued, jobs = self.queued, self.jobs
        decided_shares: set[str] = set()
        for decision in self.decisions:
            job = queued.state.jobs[decided_job(decision)]
            if not job.awaiting_victims:  # not a reservation granted in step 1
                decided_shares.add(job.share_name)
        fronts: dict[tuple[str, str], list[Job]] = {}
        for share_name, waiting in queued.by_share.items():
            own = {unit: fronts.setdefault((share_name, unit), []) for unit in queued.smallest[share_name]}
            unfinished = len(own)
            check = share_name in decided_shares
            for job in waiting:
                if check and jobs[job.job_id] is not job:
                    continue  # granted or reserving
                front = own[job.request.capacity_unit]
                if len(front) < EXACT_PLACES:
                    front.append(job)
                    if len(front) == EXACT_PLACES:
                        unfinished -= 1
                        if not unfinished:
                            break
        return {key: front for key, front in fronts.items() if front}

    def _stopping_units(self) -> dict[str, int]:
        """Per unit, what jobs being stopped still hold: those that came in so, and this cycle's victims."""
        stopping: dict[str, int] = defaultdict(int)
        for job in self.queued.holding:
            if job.stop_cause is not None:
                stopping[job.request.capacity_unit] += job.request.instance_count
        for decision in self.decisions:
            if isinstance(decision, Preemption):
                for victim_id in decision.victim_ids:
                    victim = self.queued.state.jobs[victim_id]
                    if victim.stop_cause is None:
                        stopping[victim.request.capacity_unit] += victim.request.instance_count
        return stopping

    def _explain_reserved(self, job: Job) -> None:
        """The statusReason of a RUNNABLE reservation: the stops it waits for, or why it still waits."""
        if job.status is not JobStatus.RUNNABLE:
            return
        stopping = self.usage.stops_giving(job.job_id)
        if stopping:
            victims = [stop_id for stop_id in stopping if self.jobs[stop_id].preempted_by == job.job_id]
            spare_of = {
                stop_id: self.jobs[stop_id].preempted_by for stop_id in stopping if stop_id not in victims
            }
            reason = awaiting_victims_reason(victims, spare_of)
        else:
            reason = capacity_lowered_reason(
                job, self.usage.capacity(job.unit), self.usage.occupancy.get(job.unit, 0)
            )
        if reason != job.status_reason:
            self.status_reasons[job.job_id] = reason

    # -- one job -------------------------------------------------------------------------------------

    def _admit(self, job: Job) -> None:
        """Grant ``job`` idle capacity, or preempt for it, or leave it waiting."""
        request = job.request
        unit, share_name = request.capacity_unit, request.quota_share_name
        count, priority = request.instance_count, request.scheduling_priority
        failed_on_unit = self.failures.get(unit)
        failed = failed_on_unit.get(share_name) if failed_on_unit else None
        if failed and _covered(failed, count, priority):
            return
        if self.usage.fits(share_name, unit, count):
            self._grant(job)
            return
        spare = self.usage.spare(unit)
        if spare:
            spare = spare_order(spare, share_name)
            stops = claim_spare(self.usage, job, spare)
            if stops is not None:
                self._promise(job, stops)
                return
        choice = choose_victims(self.usage, job, self.running, spare, self.victim_policy)
        if choice is not None and choice.not_before is not None:
            self.not_before[job.job_id] = (choice.not_before, choice.at_checkpoint)
            choice = None
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

    # -- applying decisions ----------------------------------------------------------------------------

    def _set_job(self, job: Job) -> None:
        """``job`` as this cycle's decisions leave it (the jobs are copied on the first change)."""
        if not self._copied:
            self.jobs = dict(self.jobs)
            self._copied = True
        self.jobs[job.job_id] = job

    def _decided(self, decision: Decision, shares_changed: set[str], pool_grew: bool) -> None:
        """Record ``decision`` and forget the failed searches it may have made possible.

        A decision takes idle capacity and candidates away, so failed searches stay failed, except for
        the shares whose usage it changed; and for every share when it leaves a share borrowing (a new
        reclaim candidate) or makes the lending pool grow (less borrowed, or more lent).
        """
        self.decisions.append(decision)
        self.changes += 1
        unit = decision.capacity_unit
        if pool_grew or self.usage.borrowing[unit] & shares_changed:
            self.failures.pop(unit, None)
            if self.sleeping:
                self.sleeping.forgotten(unit, None)
            return
        failures = self.failures.get(unit, {})
        for share_name in shares_changed:
            failures.pop(share_name, None)
        if self.sleeping:
            self.sleeping.forgotten(unit, shares_changed)

    def _grant(self, job: Job) -> None:
        share = self.usage.shares[job.share_name]
        if job.holds_reservation:
            self.usage.reservation_granted(job)
        else:
            self.usage.hold(job)
        used_after = self.usage.usage(job.share_name, job.unit)
        borrowed = max(0, min(job.count, used_after - share.own_limit(job.unit)))
        granted = job.granted((self.now, self.next_start_seq))
        self.next_start_seq += 1
        self._set_job(granted)
        if not job.holds_reservation:
            self.running.add(granted)
            self.granted_now.add(job.job_id)
        self._decided(Grant(job.job_id, job.unit, job.count, borrowed), {job.share_name}, pool_grew=False)

    def _take_back(self, granted: list[Job], needed_by: str) -> None:
        """Withdraw grants of this cycle, not yet emitted, whose units ``needed_by`` needs: the jobs wait
        again, as they came into the cycle."""
        taken_back = {job.job_id for job in granted}
        self.changes += 1
        self.decisions = [
            decision
            for decision in self.decisions
            if not (isinstance(decision, Grant) and decision.job_id in taken_back)
        ]
        for job in granted:
            self.running.remove(job)
            self.granted_now.discard(job.job_id)
            self.usage.hold(job, -1)
            self._set_job(self.queued.state.jobs[job.job_id])
            self.withheld[job.job_id] = needed_by
            self.failures.pop(job.unit, None)  # room came back on the unit
            if self.sleeping:
                self.sleeping.forgotten(job.unit, None)

    def _preempt(self, preemptor: Job, choice: VictimChoice) -> None:
        """Stop ``choice``'s victims for ``preemptor``, which awaits them (and the stops under way whose
        spare units it takes too). The victims keep their units and keep counting in their shares until
        they have stopped."""
        overdraft_before = self.usage.overdraft(preemptor.unit)
        spare = [(stop, self.usage.spare_units.get(stop.job_id, 0)) for stop in choice.spare_of]
        claim = split_claim(preemptor, choice.victims, spare)
        for victim in choice.victims:
            reason = f"Being stopped: preempted by {preemptor.job_id} ({choice.rule})"
            stopping = victim.being_stopped(StopCause.PREEMPTED, preemptor.job_id, reason)
            self._set_job(stopping)
            self.running.remove(victim)
            self.usage.stop(stopping)
        victim_ids = tuple(victim.job_id for victim in choice.victims)
        reserving = preemptor.reserving(claim)
        self._set_job(reserving)
        self.usage.reserve(reserving)
        changed = {preemptor.share_name} | {victim.share_name for victim in choice.victims}
        # Less borrowed once the victims stop, or spare units of theirs to promise: any share's failed
        # searches on the unit may succeed now.
        pool_grew = self.usage.overdraft(preemptor.unit) < overdraft_before or any(
            self.usage.spare_units.get(victim_id) for victim_id in victim_ids
        )
        self._decided(
            Preemption(preemptor.job_id, victim_ids, choice.rule, preemptor.unit), changed, pool_grew
        )

    def _promise(self, job: Job, stops: tuple[Job, ...]) -> None:
        """``job`` gets the spare units of the stops under way ``stops`` and waits for them."""
        stop_ids = tuple(stop.job_id for stop in stops)
        spare = [(stop, self.usage.spare_units.get(stop.job_id, 0)) for stop in stops]
        reserving = job.reserving(split_claim(job, (), spare))
        self._set_job(reserving)
        self.usage.reserve(reserving)
        self._decided(Promise(job.job_id, stop_ids, job.unit), {job.share_name}, pool_grew=False)


class _Sleeping:
    """Step 3's shares left out of the merge while failed searches rule out all their later jobs.

    Failed searches are only added to until a decision forgets some: a share sleeps from the first job
    they rule out (with the greatest submission key of its jobs before, the running maximum) and wakes
    when a decision forgets a failed search of its, on any of its units. It then goes on from the job
    the merge would have reached: in a merge by heads, a share's job comes out right after the greatest
    key among its jobs before it, so every job of the share whose running maximum is below the key of
    the turn that woke it was passed over (ruled out) meanwhile.
    """

    def __init__(self, smallest: dict[str, dict[str, int]]) -> None:
        #: Per share, its waiting jobs' units (``_Queued.smallest``).
        self.units = smallest
        self.at: dict[str, tuple[int, tuple[OrderKey, str] | None]] = {}
        self.on_unit: dict[str, set[str]] = defaultdict(set)
        #: The shares woken since the merge last took them back.
        self.woken: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.at)

    def add(self, share_name: str, index: int, passed: tuple[OrderKey, str] | None) -> None:
        self.at[share_name] = (index, passed)
        for unit in self.units[share_name]:
            self.on_unit[unit].add(share_name)

    def forgotten(self, unit: str, share_names: set[str] | None) -> None:
        """Failed searches on ``unit`` forgotten: of ``share_names``, or of every share."""
        sleepers = self.on_unit.get(unit)
        if not sleepers:
            return
        woken = sorted(sleepers if share_names is None else sleepers & share_names)
        for share_name in woken:
            for each in self.units[share_name]:
                self.on_unit[each].discard(share_name)
        self.woken += woken

    def wake(
        self, deferred: dict[str, list[Job]], passed: tuple[OrderKey, str]
    ) -> list[tuple[OrderKey, str, str, int]]:
        """The heads of the shares woken, the merge being at ``passed`` (the greatest key of its turn)."""
        heads: list[tuple[OrderKey, str, str, int]] = []
        for share_name in self.woken:
            first, top = self.at.pop(share_name)
            jobs = deferred[share_name]
            # The first job past ``passed`` by running maximum (then its own key: a new maximum), in C.
            running = accumulate(map(SUBMISSION, islice(jobs, first, None)), max, initial=top)
            if top is not None:
                next(running)  # (``top`` itself)
            index = next(compress(range(first, len(jobs)), map(passed.__lt__, running)), None)
            if index is not None:
                submitted, job_id = SUBMISSION(jobs[index])
                heads.append((submitted, job_id, share_name, index))
        self.woken.clear()
        return heads


def _all_ruled_out(
    room: dict[str, int],
    smallest: dict[str, int],
    failed_by_unit: dict[str, list[tuple[int, int]]],
    priority: int,
) -> bool:
    """Whether no later job of a share in step 2 can be admitted: none needs less than ``smallest`` on its
    unit or has a higher ``priority``, so on each unit it does not fit the ``room`` or a failed search
    rules it out."""
    return all(
        count > room[unit] or _covered(failed_by_unit.get(unit, ()), count, priority)
        for unit, count in smallest.items()
    )


def _failed_of(
    failures: dict[str, dict[str, list[tuple[int, int]]]], share_name: str
) -> dict[str, list[tuple[int, int]]]:
    """Per unit, the failed attempts of ``share_name`` (the lists themselves: appended in place)."""
    return {unit: failed for unit, by_share in failures.items() if (failed := by_share.get(share_name))}


def _covered(failed: Iterable[tuple[int, int]], count: int, priority: int) -> bool:
    """Whether a failed attempt (count, priority) of the share on the unit rules out a job needing
    ``count`` at ``priority``: it needed no more and had no lower priority."""
    for failed_count, failed_priority in failed:
        if failed_count <= count and failed_priority >= priority:
            return True
    return False
