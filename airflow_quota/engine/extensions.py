"""Our extensions to AWS Batch's quota rules (issue 37): small pure rules, each off by default.

Each is a plain field of ``QuotaShare`` (the quota file's ``extensions:`` block of a share, validated in
``engine.config``), so AWS-compatible behaviour stays the default and a search over designs can set them:

* *lost work*, always measured: a preemption loses the victim's units x the time since its last
  checkpoint in the attempt it is in, or since that attempt's start when it never checkpointed
  (``lost_unit_seconds``); the simulator reports the same figure.
* ``checkpoint_aware_victims`` (the preemptor's share): among victims of one rank of the victim order
  (other shares first, then lowest priority), those that lose the least work go first, instead of the
  most recently started (``least_lost_first``); ties keep the usual order.
* ``minimum_run_seconds`` (the victim's share): a job that started less than that many seconds ago is not
  a victim (``VictimPolicy.protected_until``); a preemptor that only such jobs would let fit waits, its
  statusReason saying from when it may preempt.
* ``starvation_limit_seconds`` (the waiting job's share): once the share's front job on a unit (the first
  in share order) has waited longer than that since its submission, the later jobs of its share on that
  unit no longer start before it: the capacity the share frees there is held for it until it starts
  (``is_starving``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter

from airflow_quota.engine.model import Job, JobQueue

_PRIORITY = attrgetter("request.scheduling_priority")


def lost_unit_seconds(job: Job, at: float) -> float:
    """The unit-seconds a preemption of ``job`` loses when its training ends at ``at``: its units x the time
    since its last checkpoint in its current attempt, or since the attempt started (0 if it never did)."""
    if job.started is None:
        return 0.0
    since = job.started[0]
    if job.last_checkpoint is not None and job.last_checkpoint > since:
        since = job.last_checkpoint
    return job.request.instance_count * max(0.0, at - since)


def least_lost_first(candidates: Iterable[Job], now: float) -> Iterator[Job]:
    """``candidates`` (in victim order: lowest priority first) with each priority's jobs reordered by the
    work a preemption now would lose, least first; jobs that would lose the same keep their order.

    The whole job's loss, not its loss per unit it frees: per unit takes a large job whose few seconds a
    unit add up to more than a small job's whole loss, and lost more on every trace of
    ``benchmarks/checkpoint_victims.py``, whose per-decision best within the rules this order nearly
    reaches (docs/extensions.md)."""
    for _, same_priority in groupby(candidates, key=_PRIORITY):
        yield from sorted(same_priority, key=lambda job: lost_unit_seconds(job, now))


def waiting_since(job: Job) -> float:
    """How long a waiting job counts as waiting: since its submission (a requeued job keeps its place,
    and its submission time with it)."""
    return job.submitted[0]


def is_starving(job: Job, limit_seconds: float | None, now: float) -> bool:
    """Whether ``job``, the front job of its share on its unit, has waited longer than ``limit_seconds``."""
    return limit_seconds is not None and now - waiting_since(job) > limit_seconds


@dataclass(frozen=True, slots=True)
class VictimPolicy:
    """The victim rules of our extensions at one cycle's ``now``; ``of`` gives None when no share uses
    them, and the victim search then runs exactly as without extensions."""

    now: float
    #: Per share with the option, its jobs' minimum run time before they may be preempted.
    minimum_run: dict[str, float]
    #: The shares whose jobs, preempting, take the victims that lose the least work first.
    checkpoint_aware: frozenset[str]

    @staticmethod
    def of(queue: JobQueue, now: float) -> VictimPolicy | None:
        minimum_run = {s.name: s.minimum_run_seconds for s in queue.shares if s.minimum_run_seconds > 0}
        aware = frozenset(s.name for s in queue.shares if s.checkpoint_aware_victims)
        if not minimum_run and not aware:
            return None
        return VictimPolicy(now, minimum_run, aware)

    def protected_until(self, job: Job) -> float | None:
        """When ``job`` may be preempted, if it may not be yet (its share's minimum run time)."""
        seconds = self.minimum_run.get(job.request.quota_share_name)
        if not seconds or job.started is None:
            return None
        until = job.started[0] + seconds
        return until if until > self.now else None

    def may_preempt(self, job: Job) -> bool:
        return self.protected_until(job) is None

    def order(self, preemptor_share: str, candidates: Iterable[Job]) -> Iterable[Job]:
        """``candidates`` (in victim order) in the order ``preemptor_share``'s jobs take them."""
        if preemptor_share in self.checkpoint_aware:
            return least_lost_first(candidates, self.now)
        return candidates
