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
* ``preempt_at_checkpoint`` (the victim's share): a preemption whose chosen victims reach their next
  checkpoint (predicted from their last reported checkpoint, or their start, and the share's declared
  interval) within the share's maximum wait is made once they have, a margin after it, not now: the same
  victims, the moment moved (``checkpoint_wait_until``); the preemptor's statusReason says until when.
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

from airflow_quota.engine.model import Job, JobQueue, PreemptAtCheckpoint

_PRIORITY = attrgetter("request.scheduling_priority")
#: Seconds by which a moment may miss another, worked out otherwise, and still count as it (a cycle run at
#: the moment a preemption was put off to sees its victims at their checkpoints, rounding aside).
_SLACK = 1e-3


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


def checkpoint_wait_until(job: Job, setting: PreemptAtCheckpoint, now: float) -> float | None:
    """Until when a preemption of ``job`` at ``now`` waits for its next checkpoint (that checkpoint +
    the margin), or None when it is made now.

    Its checkpoints are predicted every ``checkpoint_interval_seconds`` from its last reported checkpoint
    in this attempt, or from the attempt's start when it reported none. None when it is at a checkpoint
    (the last one, reported or predicted, is at most ``margin_seconds`` old: a preemption that waited is
    made then, and is not put off to the one after) or when the next one + the margin is more than
    ``maximum_wait_seconds`` away."""
    if job.started is None:
        return None
    base = job.started[0]
    reported = job.last_checkpoint is not None and job.last_checkpoint > base
    if reported:
        assert job.last_checkpoint is not None
        base = job.last_checkpoint
    interval, margin = setting.checkpoint_interval_seconds, setting.margin_seconds
    since = max(0.0, now - base)
    passed = int(since // interval)  # predicted checkpoints since ``base``
    if (reported or passed) and since - passed * interval <= margin + _SLACK:
        return None  # at a checkpoint
    until = base + (passed + 1) * interval + margin
    return until if until - now <= setting.maximum_wait_seconds else None


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
    #: Per share with the option, how a preemption of its jobs waits for their next checkpoint.
    at_checkpoint: dict[str, PreemptAtCheckpoint]

    @staticmethod
    def of(queue: JobQueue, now: float) -> VictimPolicy | None:
        minimum_run = {s.name: s.minimum_run_seconds for s in queue.shares if s.minimum_run_seconds > 0}
        aware = frozenset(s.name for s in queue.shares if s.checkpoint_aware_victims)
        at_checkpoint = {
            s.name: s.preempt_at_checkpoint for s in queue.shares if s.preempt_at_checkpoint is not None
        }
        if not minimum_run and not aware and not at_checkpoint:
            return None
        return VictimPolicy(now, minimum_run, aware, at_checkpoint)

    def protected_until(self, job: Job) -> float | None:
        """When ``job`` may be preempted, if it may not be yet (its share's minimum run time)."""
        seconds = self.minimum_run.get(job.request.quota_share_name)
        if not seconds or job.started is None:
            return None
        until = job.started[0] + seconds
        return until if until > self.now else None

    def checkpoint_wait(self, victims: Iterable[Job], at: float) -> float | None:
        """Until when a preemption of ``victims`` at ``at`` waits for their next checkpoints: the latest
        of those their shares wait for (``checkpoint_wait_until``); None when it is made then."""
        if not self.at_checkpoint:
            return None
        waits = [
            until
            for victim in victims
            if (setting := self.at_checkpoint.get(victim.request.quota_share_name)) is not None
            and (until := checkpoint_wait_until(victim, setting, at)) is not None
        ]
        return max(waits, default=None)

    def may_preempt(self, job: Job) -> bool:
        return self.protected_until(job) is None

    def order(self, preemptor_share: str, candidates: Iterable[Job]) -> Iterable[Job]:
        """``candidates`` (in victim order) in the order ``preemptor_share``'s jobs take them."""
        if preemptor_share in self.checkpoint_aware:
            return least_lost_first(candidates, self.now)
        return candidates
