"""Small builders for engine tests: a queue, its shares and jobs in a given state, in one line each."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_quota.engine.model import (
    Grant,
    Job,
    JobQueue,
    JobRequest,
    JobStatus,
    Preemption,
    Promise,
    QueueState,
    QuotaShare,
    ShareState,
    SharingStrategy,
    StopCause,
)

RESERVE = SharingStrategy.RESERVE
LEND = SharingStrategy.LEND
BORROW = SharingStrategy.LEND_AND_BORROW


def share(
    name: str,
    gpu: int | None = None,
    strategy: SharingStrategy = BORROW,
    *,
    borrow: int = -1,
    preempt: bool = False,
    disabled: bool = False,
    **other_units: int,
) -> QuotaShare:
    limits = dict(other_units)
    if gpu is not None:
        limits["gpu"] = gpu
    return QuotaShare(
        name=name,
        capacity_limits=limits,
        strategy=strategy,
        borrow_limit=borrow,
        in_share_preemption=preempt,
        state=ShareState.DISABLED if disabled else ShareState.ENABLED,
    )


def queue(gpu: int, *shares: QuotaShare, **other_units: int) -> JobQueue:
    return JobQueue(name="q", capacity={"gpu": gpu, **other_units}, shares=shares)


def waiting(
    job_id: str,
    share_name: str,
    count: int,
    *,
    prio: int = 0,
    at: float = 0.0,
    unit: str = "gpu",
    seq: int = 0,
    retries: int | None = None,
    awaiting: Mapping[str, int] | None = None,
) -> Job:
    return Job(
        job_id=job_id,
        request=JobRequest(job_id, share_name, unit, count, prio, retries),
        submitted=(at, seq),
        awaiting_victims=dict(awaiting or {}),
    )


def running(
    job_id: str,
    share_name: str,
    count: int,
    *,
    prio: int = 0,
    at: float = 0.0,
    started: float | None = None,
    unit: str = "gpu",
    seq: int = 0,
    start_seq: int = 0,
    retries: int | None = None,
    stopping_for: str | None = None,
    stop_cause: StopCause | None = None,
) -> Job:
    start = at if started is None else started
    cause = stop_cause or (StopCause.PREEMPTED if stopping_for else None)
    return Job(
        job_id=job_id,
        request=JobRequest(job_id, share_name, unit, count, prio, retries),
        submitted=(at, seq),
        status=JobStatus.RUNNING,
        started=(start, start_seq),
        stop_cause=cause,
        preempted_by=stopping_for,
    )


def state(q: JobQueue, *jobs: Job) -> QueueState:
    return QueueState(q, {job.job_id: job for job in jobs})


@dataclass(frozen=True)
class Summary:
    """Decisions as a test reads them: who was granted, who preempted whom by which rule, and who was
    promised the spare units of which stops under way."""

    granted: tuple[str, ...]
    preempted: tuple[tuple[str, tuple[str, ...], str], ...]
    promised: tuple[tuple[str, tuple[str, ...]], ...] = ()


def summarize(decisions: tuple[Grant | Preemption | Promise, ...]) -> Summary:
    granted = tuple(d.job_id for d in decisions if isinstance(d, Grant))
    preempted = tuple(
        (d.preemptor_id, tuple(sorted(d.victim_ids)), d.rule.value)
        for d in decisions
        if isinstance(d, Preemption)
    )
    promised = tuple((d.job_id, tuple(sorted(d.stop_ids))) for d in decisions if isinstance(d, Promise))
    return Summary(granted, preempted, promised)
