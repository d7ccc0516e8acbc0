"""Why a job waits: AWS's misconfiguration codes for jobs that can never start, plain words otherwise."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

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


def waiting_reason(
    usage: Usage, share: QuotaShare, job: Job, stopping: Mapping[str, int] | None = None
) -> str:
    """A plain-words statusReason for a RUNNABLE job that could not start in this cycle."""
    return WaitingReasons(usage, stopping or {}).reason(share, job.unit, job.count)


#: How many shares a reason names in one list before it says "+N more" (reasons show in 80-column tables).
NAMED_SHARES = 3


class WaitingReasons:
    """``waiting_reason`` for the many jobs of one cycle's end: what depends on the share and unit alone
    (limits, what can be borrowed, who holds the unit) is worked out once per share and unit.

    Each reason says what the job needs against its share's own limit, then what holds the capacity it
    waits for: its free units lent to borrowers or held by jobs being stopped; its own jobs (a share that
    does not borrow, or at its borrow ceiling); or, for a job that would borrow, who holds the unit (a
    share borrowing within its limit marked), its idle units and whose (RESERVE ones are never lent), or
    that the queue is full. The words name shares, not how many units each holds: a reason stays the
    same while capacity turns over among the same holders, so a cycle does not rewrite the reasons of
    thousands of waiting jobs each time one job ends and another starts (``jobs show`` and ``snapshot``
    have the counts).
    """

    def __init__(self, usage: Usage, stopping: Mapping[str, int]) -> None:
        self.usage = usage
        #: Per unit, the units jobs being stopped still hold.
        self.stopping = stopping
        self._texts: dict[tuple[str, str], _ShareTexts] = {}
        self._holders: dict[str, str] = {}
        self._lent: dict[tuple[str, bool], str] = {}

    def reason(self, share: QuotaShare, unit: str, count: int) -> str:
        texts = self._texts.get((share.name, unit))
        if texts is None:
            texts = self._texts[(share.name, unit)] = _ShareTexts(self.usage, share, unit)
        # The words before the job's count, the count, then those after it (per case, built once).
        used = texts.used
        if used + count <= texts.own:
            after = texts.within or texts.fill_within(self)
            return f"Waiting for capacity: this job needs {count}{after}"
        if not texts.borrows:
            after = texts.beyond or texts.fill_beyond_own(share)
            return f"Waiting for capacity: this job needs {count}{after}"
        ceiling = texts.ceiling
        if ceiling is not None and used + count > ceiling:
            after = texts.beyond or texts.fill_past_ceiling(ceiling)
            return f"Waiting for capacity: this job needs {count}{after}"
        after = texts.borrow or texts.fill_borrow(self)
        return f"Waiting for capacity to borrow: this job needs {count}{after}"

    def lent_or_stopping(self, unit: str, lends: bool) -> str:
        """Why a share's own free units are not free: lent to borrowers (a share that lends; named), or
        held by jobs being stopped."""
        text = self._lent.get((unit, lends))
        if text is None:
            usage = self.usage
            borrowing = usage.borrowing.get(unit) if lends else None
            borrowers = (
                [share.name for share in usage.queue.shares if share.name in borrowing] if borrowing else []
            )
            parts = [f"lent (to {_named(borrowers)})"] if borrowers else []
            if self.stopping.get(unit):
                parts.append("held by jobs being stopped")
            text = self._lent[(unit, lends)] = (
                f"its free units are {' or '.join(parts)}" if parts else self.holders(unit)
            )
        return text

    def holders(self, unit: str) -> str:
        """Who holds ``unit`` (borrowers marked), its idle units and whose, or that the queue is full."""
        text = self._holders.get(unit)
        if text is None:
            text = self._holders[unit] = _holders_text(self.usage, unit, self.stopping.get(unit, 0))
        return text


class _ShareTexts:
    """What the reasons of one share's jobs on one unit have in common: its usage and limits, and the
    words after a job's count in each case (``WaitingReasons.reason``), built when first needed."""

    __slots__ = ("beyond", "borrow", "borrows", "ceiling", "own", "share", "unit", "used", "within")

    def __init__(self, usage: Usage, share: QuotaShare, unit: str) -> None:
        self.share, self.unit = share, unit
        self.used = usage.usage(share.name, unit)
        self.own = share.own_limit(unit)
        self.ceiling = share.ceiling(unit)
        self.borrows = share.borrows  # (read for each of its jobs' groups: a property costs a call)
        #: Within its own limit; beyond it, for a share that cannot borrow (its own limit, or its borrow
        #: ceiling: a share has one of the two); and to borrow.
        self.within = self.beyond = self.borrow = ""

    def fill_within(self, reasons: WaitingReasons) -> str:
        held_elsewhere = reasons.lent_or_stopping(self.unit, self.share.lends)
        self.within = (
            f" {self.unit}, within what quota share {self.share.name} has free of its own {self.own}; "
            f"{held_elsewhere}"
        )
        return self.within

    def fill_beyond_own(self, share: QuotaShare) -> str:
        self.beyond = (
            f" {self.unit}, more than quota share {share.name} has free of its own {self.own}; a "
            f"{share.strategy} share does not borrow: it waits for its own jobs to finish"
        )
        return self.beyond

    def fill_past_ceiling(self, ceiling: int) -> str:
        self.beyond = (
            f" {self.unit}, which would take quota share {self.share.name} past its borrow ceiling of "
            f"{ceiling}: it waits for its own jobs to finish"
        )
        return self.beyond

    def fill_borrow(self, reasons: WaitingReasons) -> str:
        share_name, unit = self.share.name, self.unit
        borrowable = reasons.usage.borrowable_by(share_name, unit)
        self.borrow = (
            f" {unit}, more than quota share {share_name} has free of its own {self.own}; {borrowable} can "
            f"be borrowed now. {reasons.holders(unit)}"
        )
        return self.borrow


def _holders_text(usage: Usage, unit: str, stopping: int) -> str:
    # Each share's own limit and usage of the unit, read once (a cycle asks once per unit, of every share).
    used_of = usage.share_usage.get
    terms = [
        (share, share.capacity_limits.get(unit, 0), used_of((share.name, unit), 0))
        for share in usage.queue.shares
    ]
    held: list[str] = []
    borrowed_total = 0
    for share, own, used in terms:
        if used:
            borrowed = max(0, used - own)
            borrowed_total += borrowed
            held.append(share.name + (" (borrowing within its limit)" if borrowed else ""))
    held_text = _named(held) if held else "none"
    stopping_text = "; jobs being stopped hold some" if stopping else ""
    idle = usage.idle(unit)
    if not idle:
        return f"The queue is full, held by {held_text}{stopping_text}"
    # Whose the idle units are, in configuration order: a share's unused units (a lender's less what
    # borrowers use beyond the unowned capacity, ``lent_capacity``'s convention), then unowned ones.
    to_attribute = max(0, borrowed_total - usage.unowned(unit))
    unowned = max(0, usage.unowned(unit) - borrowed_total)
    reserve: list[str] = []
    lenders: list[str] = []
    left = idle
    for share, own, used in terms:
        free = max(0, own - used)
        if share.lends:
            lent = min(free, to_attribute)
            to_attribute -= lent
            free -= lent
        free = min(free, left)
        if free:
            left -= free
            if share.lends:
                lenders.append(f"{free} of {share.name}")
            else:
                reserve.append(f"{free} of {share.name} (RESERVE, never lent)")
    idle_parts = reserve + lenders
    if left and unowned:
        idle_parts.append(f"{min(left, unowned)} unowned")
    idle_text = f"; idle: {_named(idle_parts)}" if idle_parts else f"; {idle} idle"
    held_by = "Held by none" if not held else f"Held by {held_text}"
    return f"{held_by}{stopping_text}{idle_text}"


def _named(items: list[str]) -> str:
    shown = ", ".join(items[:NAMED_SHARES])
    return shown if len(items) <= NAMED_SHARES else f"{shown} +{len(items) - NAMED_SHARES} more"


#: A waiting job says exactly how many jobs of its share on the same unit come first, and the first of
#: them, up to this many less one; from it on, "5+" and no name: its reason does not change whenever a
#: job ahead starts (the first one too), a cycle need not write a new reason for thousands of jobs, and it
#: is worked out once per group of jobs.
#: ``airflow quota jobs show`` has the exact position.
EXACT_PLACES = 5


def behind_text(ahead: int, first: str, share_name: str) -> str:
    """What a waiting job adds when ``ahead`` jobs of its share needing the same unit come first (the
    first of them named while fewer than ``EXACT_PLACES``)."""
    if ahead == 1:
        return f"; behind {first} of its share"
    if ahead >= EXACT_PLACES:
        return f"; behind {EXACT_PLACES}+ waiting jobs of share {share_name}"
    return f"; behind {ahead} waiting jobs of share {share_name}, first {first}"


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


def awaiting_victims_reason(victims: list[str], spare_of: Mapping[str, str | None] | None = None) -> str:
    """What a reservation waits for: its own victims to stop, and stops under way whose spare units it
    was promised (``spare_of``: each stop and the job it is being stopped for, None when terminated)."""
    parts = []
    if victims:
        parts.append(f"{len(victims)} preempted job(s) to stop: {', '.join(sorted(victims))}")
    if spare_of:
        stops = ", ".join(
            f"{stop_id} (being stopped for {by})" if by else f"{stop_id} (being terminated)"
            for stop_id, by in sorted(spare_of.items())
        )
        parts.append(
            f"the units it was promised of {len(spare_of)} stop(s) under way to be released: {stops}"
        )
    return "Waiting for " + "; and for ".join(parts)


# -- our extensions (engine/extensions.py) ---------------------------------------------------------------


def clock_text(at: float) -> str:
    """A moment of the engine's clock in words: a UTC time for epoch seconds (the allocator's), else the
    simulator's seconds from its start."""
    if at >= 1e9:
        return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"t={at:g} s"


def minimum_run_reason(waiting: str, not_before: float) -> str:
    """A waiting job's reason when the jobs it would preempt are still within their minimum run time."""
    return (
        f"{waiting}; the jobs it would preempt have not run their quota share's minimumRunSeconds yet: "
        f"it may preempt them from {clock_text(not_before)}"
    )


def checkpoint_wait_reason(waiting: str, not_before: float) -> str:
    """A waiting job's reason when the jobs it would preempt are to reach their next checkpoint first."""
    return (
        f"{waiting}; the jobs it would preempt reach their next checkpoint soon (their quota share's "
        f"preemptAtCheckpoint): it preempts them from {clock_text(not_before)}"
    )


def starving_reason(waiting: str, limit_seconds: float) -> str:
    """The reason of a share's front job that has waited past its share's starvationLimitSeconds."""
    return (
        f"{waiting}; waiting longer than starvationLimitSeconds ({limit_seconds:g} s): capacity its share "
        "frees on this unit is held for it until it fits"
    )


def held_for_starving_reason(front: Job) -> str:
    """The reason of a later job of a share whose capacity on its unit is held for a starving job."""
    return (
        f"Waiting for capacity: held for {front.job_id}, which has waited longer than quota share "
        f"{front.share_name}'s starvationLimitSeconds: later jobs of the share on {front.unit} start after it"
    )
