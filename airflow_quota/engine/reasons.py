"""Why a job waits: AWS's misconfiguration codes for jobs that can never start, plain words otherwise."""

from __future__ import annotations

from airflow_quota.engine.model import (
    QUOTA_MANAGEMENT_LIMIT_EXCEEDED,
    SERVICE_ENVIRONMENT_MAX_RESOURCE,
    Job,
    JobQueue,
    QuotaShare,
)
from airflow_quota.engine.usage import UnitTotals, Usage


def never_fits_reason(
    queue: JobQueue,
    share: QuotaShare | None,
    unit: str,
    count: int,
    totals: dict[str, UnitTotals] | None = None,
) -> str | None:
    """The AWS misconfiguration code when ``count`` units of ``unit`` can never start in ``share``.

    SERVICE_ENVIRONMENT_MAX_RESOURCE (the queue lacks the unit or has fewer than asked) wins over
    QUOTA_MANAGEMENT_LIMIT_EXCEEDED (more than the share can ever hold: the smaller of its ceiling and its
    own limit plus the other lending shares' limits plus unowned capacity).
    """
    return misconfiguration(startable_limits(queue, share, unit, totals), count)


#: The most units of one unit a job of one share may ask for: what the queue has (None: it lacks the
#: unit), and what the share can ever hold (None: it has no limit for the unit).
StartableLimits = tuple[int | None, int | None]


def startable_limits(
    queue: JobQueue, share: QuotaShare | None, unit: str, totals: dict[str, UnitTotals] | None = None
) -> StartableLimits:
    """What ``never_fits_reason`` compares a job's count with, for every job of ``share`` on ``unit``."""
    capacity = queue.capacity.get(unit)
    if capacity is None or share is None or not share.has_limit_for(unit):
        return capacity, None
    return capacity, most_share_can_hold(capacity, share, unit, (totals or UnitTotals.of(queue))[unit])


def misconfiguration(limits: StartableLimits, count: int) -> str | None:
    """The AWS misconfiguration code of a job of ``count`` units under ``limits``; None when it fits."""
    capacity, most = limits
    if capacity is None or count > capacity:
        return SERVICE_ENVIRONMENT_MAX_RESOURCE
    if most is None or count > most:
        return QUOTA_MANAGEMENT_LIMIT_EXCEEDED
    return None


def most_share_can_hold(capacity: int, share: QuotaShare, unit: str, totals: UnitTotals) -> int:
    own = share.own_limit(unit)
    if not share.borrows:
        return own
    unowned = max(0, capacity - totals.owned)
    lent_by_others = totals.lent - (own if share.lends else 0)
    reachable = own + lent_by_others + unowned
    ceiling = share.ceiling(unit)
    return reachable if ceiling is None else min(ceiling, reachable)


def waiting_reason(usage: Usage, share: QuotaShare, job: Job) -> str:
    """A plain-words statusReason for a RUNNABLE job that could not start in this cycle."""
    return WaitingReasons(usage).reason(share, job.unit, job.count)


class WaitingReasons:
    """``waiting_reason`` for the many jobs of one cycle's end: what depends on the share and unit alone
    (usage, limits, what can be borrowed) is worked out once per share and unit."""

    def __init__(self, usage: Usage) -> None:
        self.usage = usage
        self._terms: dict[tuple[str, str], tuple[int, int, str, int | None]] = {}

    def reason(self, share: QuotaShare, unit: str, count: int) -> str:
        terms = self._terms.get((share.name, unit))
        if terms is None:
            used, own = self.usage.usage(share.name, unit), share.own_limit(unit)
            in_use = f"quota share {share.name} is using {used} of its {own} {unit}"
            terms = self._terms[(share.name, unit)] = (used, own, in_use, share.ceiling(unit))
        used, own, in_use, ceiling = terms
        if used + count <= own:
            return (
                f"Waiting for capacity: {in_use} and this job needs {count}; the free units are still held "
                f"by jobs being stopped or lent to other shares"
            )
        if not share.borrows:
            return (
                f"Waiting for capacity: {in_use} and this job needs {count}; a {share.strategy} share "
                f"does not borrow"
            )
        if ceiling is not None and used + count > ceiling:
            return (
                f"Waiting for capacity: {in_use} and this job needs {count}, which would pass the share's "
                f"borrow ceiling of {ceiling}"
            )
        return (
            f"Waiting for capacity to borrow: {in_use} and this job needs {count}; "
            f"{self.usage.borrowable_by(share.name, unit)} {unit} can be borrowed from other shares now"
        )


#: statusReason prefix of a job that could have started, but whose units a later decision of the same
#: cycle needed (a cycle never preempts a job it granted).
WITHHELD = "Waiting for capacity: withheld for "


def withheld_reason(preemptor_id: str, job: Job) -> str:
    return (
        f"{WITHHELD}{preemptor_id}, which needed these {job.unit} in the same cycle (a cycle never "
        "preempts a job it granted)"
    )


def capacity_lowered_reason(job: Job, capacity: int, held: int) -> str:
    """A preemptor whose victims stopped, waiting because the queue's capacity was lowered since."""
    return (
        f"Waiting for its {job.count} {job.unit}: its preempted jobs have stopped, but the job queue now "
        f"has {capacity} {job.unit} and {held} are held or promised (its capacity was lowered since); it "
        "starts as others release theirs"
    )


def awaiting_victims_reason(stopping: list[str]) -> str:
    names = ", ".join(sorted(stopping))
    return f"Waiting for {len(stopping)} preempted job(s) to stop: {names}"
