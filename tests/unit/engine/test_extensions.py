"""Our extensions to AWS Batch's rules (issue 37, engine/extensions.py), one table row per rule: lost
work, checkpoint-aware victims, minimum run time before preemption, preemption at the victims' next
checkpoint, no starved job."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from airflow_quota.engine.extensions import lost_unit_seconds
from airflow_quota.engine.model import Job, JobQueue, PreemptAtCheckpoint, QuotaShare
from airflow_quota.engine.planner import plan_cycle
from tests.unit.engine.builders import (
    BORROW,
    LEND,
    RESERVE,
    Summary,
    queue,
    running,
    share,
    state,
    summarize,
    waiting,
)

Preempted = tuple[str, tuple[str, ...], str]


def aware(base: QuotaShare) -> QuotaShare:
    return replace(base, checkpoint_aware_victims=True)


def minimum_run(base: QuotaShare, seconds: float) -> QuotaShare:
    return replace(base, minimum_run_seconds=seconds)


def starvation(base: QuotaShare, seconds: float) -> QuotaShare:
    return replace(base, starvation_limit_seconds=seconds)


def at_checkpoint(
    base: QuotaShare, wait: float = 900, interval: float = 900, margin: float = 30
) -> QuotaShare:
    return replace(base, preempt_at_checkpoint=PreemptAtCheckpoint(interval, wait, margin))


def checkpointed(job: Job, at: float) -> Job:
    return replace(job, last_checkpoint=at)


@dataclass(frozen=True)
class Case:
    rule: str
    queue: JobQueue
    jobs: tuple[Job, ...]
    now: float = 100.0
    granted: tuple[str, ...] = ()
    preempted: tuple[Preempted, ...] = ()
    #: Job id -> a part its statusReason must contain.
    reasons: dict[str, str] = field(default_factory=dict)


#: A lender (a, 2 of 4) whose units b borrows with two jobs of 2: the one started at 0 checkpointed at 90
#: (a preemption at 100 loses 2 x 10), the one started at 50 never did (it loses 2 x 50).
LENDER_AND_BORROWER = (
    checkpointed(running("old", "b", 2, started=0, start_seq=1), 90),
    running("recent", "b", 2, started=50, start_seq=2),
    waiting("w", "a", 2, at=60),
)

CASES = [
    # -- checkpoint-aware victims ----------------------------------------------------------------------
    Case(
        "default_order_takes_the_most_recently_started_victim",
        queue(4, share("a", 2, LEND), share("b", 2, BORROW)),
        LENDER_AND_BORROWER,
        preempted=(("w", ("recent",), "RECLAIM"),),
    ),
    Case(
        "checkpoint_aware_takes_the_victim_that_loses_least",
        queue(4, aware(share("a", 2, LEND)), share("b", 2, BORROW)),
        LENDER_AND_BORROWER,
        preempted=(("w", ("old",), "RECLAIM"),),
    ),
    Case(
        "checkpoint_aware_is_the_preemptors_shares_choice",
        queue(4, share("a", 2, LEND), aware(share("b", 2, BORROW))),
        LENDER_AND_BORROWER,
        preempted=(("w", ("recent",), "RECLAIM"),),
    ),
    Case(
        "checkpoint_aware_keeps_lowest_priority_first",
        queue(4, aware(share("a", 2, LEND)), share("b", 2, BORROW)),
        (
            checkpointed(running("old", "b", 2, prio=5, started=0, start_seq=1), 99),
            running("recent", "b", 2, prio=1, started=50, start_seq=2),
            waiting("w", "a", 2, at=60),
        ),
        preempted=(("w", ("recent",), "RECLAIM"),),
    ),
    Case(
        "checkpoint_aware_keeps_other_shares_before_the_preemptors_own",
        queue(3, aware(share("a", 2, LEND, preempt=True)), share("b", 1, BORROW)),
        (
            checkpointed(running("a-low", "a", 1, prio=0, started=0, start_seq=1), 99),
            checkpointed(running("b-old", "b", 1, started=10, start_seq=2), 95),
            running("b-recent", "b", 1, started=60, start_seq=3),
            waiting("w", "a", 1, prio=5, at=70),
        ),
        # a-low would lose least (1 x 1) but is of the preemptor's own share: b's job that loses least.
        preempted=(("w", ("b-old",), "RECLAIM"),),
    ),
    Case(
        "checkpoint_aware_counts_lost_work_in_units_times_seconds",
        queue(4, aware(share("a", 3, LEND)), share("b", 1, BORROW)),
        (
            # big lost 3 x 20 = 60, small 1 x 50 = 50: small goes first, and big is still needed.
            checkpointed(running("big", "b", 3, started=0, start_seq=1), 80),
            running("small", "b", 1, started=50, start_seq=2),
            waiting("w", "a", 1, at=60),
        ),
        preempted=(("w", ("small",), "RECLAIM"),),
    ),
    Case(
        "checkpoint_aware_orders_in_share_priority_victims_by_lost_work",
        queue(4, aware(share("a", 4, RESERVE, preempt=True))),
        (
            checkpointed(running("old", "a", 2, started=0, start_seq=1), 95),  # loses 2 x 5
            running("recent", "a", 2, started=50, start_seq=2),  # loses 2 x 50
            waiting("w", "a", 2, prio=5, at=60),
        ),
        preempted=(("w", ("old",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "checkpoint_aware_in_share_keeps_lowest_priority_first",
        queue(4, aware(share("a", 4, RESERVE, preempt=True))),
        (
            checkpointed(running("mid", "a", 2, prio=2, started=0, start_seq=1), 99),  # loses 2 x 1
            running("low", "a", 2, prio=1, started=10, start_seq=2),  # loses 2 x 90
            waiting("w", "a", 2, prio=5, at=60),
        ),
        preempted=(("w", ("low",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "checkpoint_aware_chooses_across_borrowing_shares_of_one_priority",
        queue(6, aware(share("a", 2, LEND)), share("b", 2, BORROW), share("c", 2, BORROW)),
        (
            running("b-base", "b", 2, started=0, start_seq=1),  # loses 2 x 100
            checkpointed(running("b-one", "b", 1, started=10, start_seq=2), 98),  # loses 1 x 2
            checkpointed(running("c-base", "c", 2, started=0, start_seq=3), 50),  # loses 2 x 50
            running("c-one", "c", 1, started=70, start_seq=4),  # loses 1 x 30
            waiting("w", "a", 1, at=80),
        ),
        # The default order takes c-one (the most recently started of both borrowers); b-one loses least.
        preempted=(("w", ("b-one",), "RECLAIM"),),
    ),
    Case(
        "checkpoint_aware_keeps_the_default_order_between_equal_losses",
        queue(4, aware(share("a", 2, LEND)), share("b", 2, BORROW)),
        (
            checkpointed(running("earlier", "b", 2, started=0, start_seq=1), 90),
            checkpointed(running("later", "b", 2, started=20, start_seq=2), 90),
            waiting("w", "a", 2, at=60),
        ),
        preempted=(("w", ("later",), "RECLAIM"),),
    ),
    Case(
        "checkpoint_aware_drops_a_victim_the_preemptor_can_do_without",
        queue(4, aware(share("a", 2, LEND)), share("b", 2, BORROW)),
        (
            # Taken by least lost: small (1 x 5), then big (2 x 5): a fits; big alone does, small goes.
            checkpointed(running("small", "b", 1, started=0, start_seq=1), 95),
            checkpointed(running("big", "b", 2, started=0, start_seq=2), 95),
            running("rest", "b", 1, started=0, start_seq=3),  # loses 1 x 100
            waiting("w", "a", 2, at=60),
        ),
        preempted=(("w", ("big",), "RECLAIM"),),
    ),
    Case(
        "checkpoint_aware_preempts_now_whatever_the_victims_lose",
        queue(4, aware(share("a", 2, LEND)), share("b", 2, BORROW)),
        (
            running("never", "b", 4, started=0, start_seq=1),  # loses 4 x 100: no checkpoint is awaited
            waiting("w", "a", 2, at=60),
        ),
        preempted=(("w", ("never",), "RECLAIM"),),
    ),
    # -- minimum run time before preemption -------------------------------------------------------------
    Case(
        "a_job_younger_than_its_shares_minimum_run_is_not_a_victim",
        queue(4, share("a", 2, LEND), minimum_run(share("b", 2, BORROW), 600)),
        (
            running("old", "b", 2, started=0, start_seq=1),
            running("young", "b", 2, started=900, start_seq=2),
            waiting("w", "a", 2, at=950),
        ),
        now=1000.0,
        preempted=(("w", ("old",), "RECLAIM"),),
    ),
    Case(
        "a_job_that_has_run_its_minimum_is_a_victim_again",
        queue(4, share("a", 2, LEND), minimum_run(share("b", 2, BORROW), 600)),
        (
            running("old", "b", 2, started=0, start_seq=1),
            running("young", "b", 2, started=900, start_seq=2),
            waiting("w", "a", 2, at=950),
        ),
        now=1500.0,
        preempted=(("w", ("young",), "RECLAIM"),),
    ),
    Case(
        "only_young_victims_preemptor_waits_and_says_from_when",
        queue(4, share("a", 2, LEND), minimum_run(share("b", 2, BORROW), 600)),
        (
            running("first", "b", 2, started=700, start_seq=1),
            running("second", "b", 2, started=900, start_seq=2),
            waiting("w", "a", 2, at=950),
        ),
        now=1000.0,
        reasons={"w": "minimumRunSeconds yet: it may preempt them from t=1500 s"},
    ),
    Case(
        "minimum_run_is_the_victims_shares_setting",
        queue(4, minimum_run(share("a", 2, LEND), 600), share("b", 2, BORROW)),
        (
            running("old", "b", 2, started=0, start_seq=1),
            running("young", "b", 2, started=900, start_seq=2),
            waiting("w", "a", 2, at=950),
        ),
        now=1000.0,
        preempted=(("w", ("young",), "RECLAIM"),),
    ),
    Case(
        "minimum_run_protects_in_share_victims_too",
        queue(2, minimum_run(share("a", 2, RESERVE, preempt=True), 600)),
        (running("low", "a", 2, prio=0, started=900, start_seq=1), waiting("high", "a", 2, prio=5, at=950)),
        now=1000.0,
        reasons={"high": "it may preempt them from t=1500 s"},
    ),
    # -- preemption at the victims' next checkpoint (interval 900 s, margin 30 s) -----------------------
    Case(
        "reclaim_waits_for_the_victims_next_checkpoint_plus_the_margin",
        queue(4, share("a", 2, LEND), at_checkpoint(share("b", 2, BORROW))),
        (checkpointed(running("v", "b", 4, started=0, start_seq=1), 900), waiting("w", "a", 2, at=950)),
        now=1000.0,
        reasons={"w": "preemptAtCheckpoint): it preempts them from t=1830 s"},
    ),
    Case(
        "the_preemption_is_made_when_the_victim_has_reached_that_checkpoint",
        queue(4, share("a", 2, LEND), at_checkpoint(share("b", 2, BORROW))),
        (checkpointed(running("v", "b", 4, started=0, start_seq=1), 1800), waiting("w", "a", 2, at=950)),
        now=1830.0,
        preempted=(("w", ("v",), "RECLAIM"),),
    ),
    Case(
        "a_victim_at_a_predicted_checkpoint_it_has_not_reported_is_preempted_then",
        queue(4, share("a", 2, LEND), at_checkpoint(share("b", 2, BORROW))),
        (running("v", "b", 4, started=0, start_seq=1), waiting("w", "a", 2, at=950)),
        now=1830.0,
        preempted=(("w", ("v",), "RECLAIM"),),
    ),
    Case(
        "a_victim_that_never_checkpointed_is_waited_for_from_its_start",
        queue(4, share("a", 2, LEND), at_checkpoint(share("b", 2, BORROW))),
        (running("v", "b", 4, started=100, start_seq=1), waiting("w", "a", 2, at=150)),
        now=200.0,
        reasons={"w": "it preempts them from t=1030 s"},
    ),
    Case(
        "a_victim_whose_next_checkpoint_is_beyond_the_wait_is_preempted_now",
        queue(4, share("a", 2, LEND), at_checkpoint(share("b", 2, BORROW), wait=300)),
        (checkpointed(running("v", "b", 4, started=0, start_seq=1), 900), waiting("w", "a", 2, at=950)),
        now=1000.0,
        preempted=(("w", ("v",), "RECLAIM"),),
    ),
    Case(
        "a_shorter_wait_still_waits_for_a_checkpoint_within_it",
        queue(4, share("a", 2, LEND), at_checkpoint(share("b", 2, BORROW), wait=300)),
        (checkpointed(running("v", "b", 4, started=0, start_seq=1), 900), waiting("w", "a", 2, at=950)),
        now=1600.0,
        reasons={"w": "it preempts them from t=1830 s"},
    ),
    Case(
        "a_victim_just_past_its_checkpoint_is_preempted_now",
        queue(4, share("a", 2, LEND), at_checkpoint(share("b", 2, BORROW))),
        (checkpointed(running("v", "b", 4, started=0, start_seq=1), 990), waiting("w", "a", 2, at=950)),
        now=1000.0,
        preempted=(("w", ("v",), "RECLAIM"),),
    ),
    Case(
        "waiting_for_checkpoints_is_the_victims_shares_setting",
        queue(4, at_checkpoint(share("a", 2, LEND)), share("b", 2, BORROW)),
        (checkpointed(running("v", "b", 4, started=0, start_seq=1), 900), waiting("w", "a", 2, at=950)),
        now=1000.0,
        preempted=(("w", ("v",), "RECLAIM"),),
    ),
    Case(
        "the_victims_stay_those_the_rules_choose_only_the_moment_moves",
        queue(4, share("a", 2, LEND), at_checkpoint(share("b", 2, BORROW))),
        (
            # The default order takes recent (started last), though old is at a checkpoint: it waits.
            checkpointed(running("old", "b", 2, started=0, start_seq=1), 995),
            running("recent", "b", 2, started=50, start_seq=2),
            waiting("w", "a", 2, at=950),
        ),
        now=1000.0,
        # recent's checkpoints are predicted at 950, 1850, ...: 950 + 30 has passed, so 1850 + 30.
        reasons={"w": "it preempts them from t=1880 s"},
    ),
    Case(
        "in_share_preemption_waits_for_the_latest_of_its_victims_checkpoints",
        queue(4, at_checkpoint(share("a", 4, RESERVE, preempt=True))),
        (
            checkpointed(running("low1", "a", 2, started=0, start_seq=1), 900),  # next: 1800 + 30
            running("low2", "a", 2, started=300, start_seq=2),  # next: 1200 + 30
            waiting("high", "a", 4, prio=5, at=950),
        ),
        now=1000.0,
        reasons={"high": "it preempts them from t=1830 s"},
    ),
    Case(
        "with_minimum_run_the_checkpoint_after_it_counts_when_later",
        queue(4, share("a", 2, LEND), at_checkpoint(minimum_run(share("b", 2, BORROW), 600))),
        (running("v", "b", 4, started=900, start_seq=1), waiting("w", "a", 2, at=950)),
        now=1000.0,
        reasons={"w": "preemptAtCheckpoint): it preempts them from t=1830 s"},
    ),
    Case(
        "with_minimum_run_its_end_counts_when_later",
        queue(4, share("a", 2, LEND), at_checkpoint(minimum_run(share("b", 2, BORROW), 1800))),
        (running("v", "b", 4, started=900, start_seq=1), waiting("w", "a", 2, at=950)),
        now=1000.0,
        # At 2700 the victim is at its second predicted checkpoint: nothing more to wait for.
        reasons={"w": "minimumRunSeconds yet: it may preempt them from t=2700 s"},
    ),
    # -- no starved job ----------------------------------------------------------------------------------
    Case(
        "before_the_starvation_limit_later_jobs_start_past_the_front",
        queue(4, starvation(share("a", 4, RESERVE), 600)),
        (running("r", "a", 2, started=0), waiting("big", "a", 4, at=0), waiting("small", "a", 1, at=100)),
        now=500.0,
        granted=("small",),
    ),
    Case(
        "past_the_limit_capacity_freed_in_the_share_is_held_for_the_front_job",
        queue(4, starvation(share("a", 4, RESERVE), 600)),
        (running("r", "a", 2, started=0), waiting("big", "a", 4, at=0), waiting("small", "a", 1, at=100)),
        now=1000.0,
        reasons={
            "big": "waiting longer than starvationLimitSeconds (600 s)",
            "small": "Waiting for capacity: held for big",
        },
    ),
    Case(
        "the_starving_job_starts_once_it_fits_and_the_hold_ends",
        queue(5, starvation(share("a", 5, RESERVE), 600)),
        (running("r", "a", 1, started=0), waiting("big", "a", 4, at=0), waiting("small", "a", 1, at=100)),
        now=1000.0,
        granted=("big",),
    ),
    Case(
        "the_hold_is_per_unit",
        queue(4, starvation(share("a", 4, RESERVE, tpu=2), 600), tpu=2),
        (
            running("r", "a", 2, started=0),
            waiting("big", "a", 4, at=0),
            waiting("small-tpu", "a", 1, at=100, unit="tpu"),
        ),
        now=1000.0,
        granted=("small-tpu",),
    ),
    Case(
        "the_hold_keeps_back_only_its_own_shares_jobs",
        queue(6, starvation(share("a", 4, RESERVE), 600), share("b", 2, RESERVE)),
        (
            running("r", "a", 2, started=0),
            waiting("big", "a", 4, at=0),
            waiting("small", "a", 1, at=100),
            waiting("other", "b", 1, at=200),
        ),
        now=1000.0,
        granted=("other",),
    ),
    Case(
        "a_higher_priority_job_is_the_front_and_not_held_back",
        queue(4, starvation(share("a", 4, RESERVE), 600)),
        (
            running("r", "a", 2, started=0),
            waiting("big", "a", 4, at=0),
            waiting("urgent", "a", 1, prio=5, at=900),
        ),
        now=1000.0,
        granted=("urgent",),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.rule for case in CASES])
def test_extension_rule(case: Case) -> None:
    plan = plan_cycle(state(case.queue, *case.jobs), now=case.now)

    assert summarize(plan.decisions) == Summary(case.granted, case.preempted)
    for job_id, part in case.reasons.items():
        reason = plan.state.jobs[job_id].status_reason
        assert part in reason, reason


def test_rule_ids_are_unique() -> None:
    assert len({case.rule for case in CASES}) == len(CASES)


LOST = [
    ("never_started_loses_nothing", waiting("w", "a", 2), 100.0, 0.0),
    ("never_checkpointed_loses_since_its_start", running("r", "a", 2, started=40), 100.0, 120.0),
    (
        "checkpointed_loses_since_its_checkpoint",
        checkpointed(running("r", "a", 2, started=40), 90),
        100.0,
        20.0,
    ),
    (
        "a_checkpoint_before_this_attempt_counts_from_the_start",
        checkpointed(running("r", "a", 2, started=40), 10),
        100.0,
        120.0,
    ),
]


@pytest.mark.parametrize(("job", "at", "lost"), [pytest.param(*row[1:], id=row[0]) for row in LOST])
def test_lost_work_is_units_times_seconds_since_the_last_checkpoint(job: Job, at: float, lost: float) -> None:
    assert lost_unit_seconds(job, at) == lost


def test_the_options_are_off_by_default() -> None:
    plain = share("a", 2)
    assert not plain.checkpoint_aware_victims
    assert plain.minimum_run_seconds == 0
    assert plain.starvation_limit_seconds is None
    assert plain.preempt_at_checkpoint is None
