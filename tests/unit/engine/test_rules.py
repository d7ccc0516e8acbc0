"""Every rule of one allocation cycle, one table row each; the row's id states the rule it checks."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from airflow_quota.engine.model import (
    QUOTA_MANAGEMENT_LIMIT_EXCEEDED,
    SERVICE_ENVIRONMENT_MAX_RESOURCE,
    Grant,
    Job,
    JobQueue,
    JobStatus,
    SharingStrategy,
    StopCause,
)
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.engine.reasons import WITHHELD, WaitingReasons
from airflow_quota.engine.usage import Usage
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


@dataclass(frozen=True)
class Case:
    rule: str
    queue: JobQueue
    jobs: tuple[Job, ...]
    granted: tuple[str, ...] = ()
    preempted: tuple[Preempted, ...] = ()
    promised: tuple[tuple[str, tuple[str, ...]], ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)


CASES = [
    # -- order ---------------------------------------------------------------------------------------
    Case(
        "higher_priority_starts_first_within_a_share",
        queue(2, share("a", 2, RESERVE)),
        (waiting("low", "a", 2, prio=1, at=0), waiting("high", "a", 2, prio=5, at=1)),
        granted=("high",),
    ),
    Case(
        "priority_zero_is_a_real_priority_below_one",
        queue(1, share("a", 1, RESERVE)),
        (waiting("zero", "a", 1, prio=0, at=0), waiting("one", "a", 1, prio=1, at=1)),
        granted=("one",),
    ),
    Case(
        "equal_priority_starts_in_submission_time_order",
        queue(1, share("a", 1, RESERVE)),
        (waiting("later", "a", 1, at=5), waiting("earlier", "a", 1, at=2)),
        granted=("earlier",),
    ),
    Case(
        "same_submission_time_starts_in_order_of_submission",
        queue(1, share("a", 1, RESERVE)),
        (waiting("second", "a", 1, at=3, seq=2), waiting("first", "a", 1, at=3, seq=1)),
        granted=("first",),
    ),
    Case(
        "requeued_job_keeps_its_original_place",
        queue(1, share("a", 1, RESERVE)),
        (waiting("newcomer", "a", 1, at=10), waiting("requeued", "a", 1, at=1)),
        granted=("requeued",),
    ),
    Case(
        "job_that_cannot_start_does_not_block_later_jobs_of_its_share",
        queue(4, share("a", 4, RESERVE)),
        (running("r", "a", 2), waiting("big", "a", 3, prio=9, at=1), waiting("small", "a", 2, at=2)),
        granted=("small",),
    ),
    # -- fit -------------------------------------------------------------------------------------------
    Case(
        "job_needs_all_its_instances_or_none",
        queue(4, share("a", 4, RESERVE)),
        (running("r", "a", 3), waiting("w", "a", 2)),
        granted=(),
    ),
    Case(
        "zero_limit_with_unlimited_borrow_means_borrow_only",
        queue(4, share("lender", 4, LEND), share("borrower", 0, BORROW)),
        (waiting("w", "borrower", 3),),
        granted=("w",),
    ),
    Case(
        "borrower_uses_idle_capacity_of_lend_shares",
        queue(4, share("lender", 2, LEND), share("b", 2, BORROW)),
        (waiting("w", "b", 4),),
        granted=("w",),
    ),
    Case(
        "borrower_uses_idle_capacity_of_lend_and_borrow_shares",
        queue(4, share("other", 2, BORROW), share("b", 2, BORROW)),
        (waiting("w", "b", 4),),
        granted=("w",),
    ),
    Case(
        "borrower_uses_queue_capacity_no_share_owns",
        queue(6, share("b", 2, BORROW)),
        (waiting("w", "b", 6),),
        granted=("w",),
    ),
    Case(
        "reserve_capacity_is_never_borrowed",
        queue(4, share("r", 2, RESERVE), share("b", 2, BORROW)),
        (waiting("w", "b", 3),),
        granted=(),
        reasons={"w": QUOTA_MANAGEMENT_LIMIT_EXCEEDED},
    ),
    Case(
        "reserve_capacity_is_never_borrowed_even_in_part",
        queue(6, share("r", 2, RESERVE), share("l", 2, LEND), share("b", 2, BORROW)),
        (running("l1", "l", 1), waiting("w", "b", 4)),
        granted=(),
    ),
    Case(
        "lend_share_never_borrows",
        queue(4, share("l", 2, LEND), share("other", 2, LEND)),
        (waiting("w", "l", 3),),
        granted=(),
        reasons={"w": QUOTA_MANAGEMENT_LIMIT_EXCEEDED},
    ),
    Case(
        "reserve_share_never_exceeds_its_own_limit",
        queue(8, share("r", 2, RESERVE)),
        (running("r1", "r", 2), waiting("w", "r", 1)),
        granted=(),
    ),
    Case(
        "borrowing_stops_at_the_ceiling",
        queue(8, share("lender", 6, LEND), share("b", 2, BORROW, borrow=100)),
        (running("b1", "b", 3), waiting("w", "b", 2)),
        granted=(),
    ),
    Case(
        "ceiling_is_own_limit_times_one_plus_borrow_limit_rounded_down",
        queue(8, share("lender", 5, LEND), share("b", 3, BORROW, borrow=50)),
        (waiting("w5", "b", 5), waiting("w4", "b", 4, at=1)),
        granted=("w4",),
        reasons={"w5": QUOTA_MANAGEMENT_LIMIT_EXCEEDED},
    ),
    Case(
        "borrow_limit_zero_means_no_borrowing",
        queue(8, share("lender", 6, LEND), share("b", 2, BORROW, borrow=0)),
        (waiting("w", "b", 3),),
        granted=(),
        reasons={"w": QUOTA_MANAGEMENT_LIMIT_EXCEEDED},
    ),
    Case(
        "lending_is_pooled_across_borrowers",
        queue(6, share("lender", 2, LEND), share("b1", 2, BORROW), share("b2", 2, BORROW)),
        (running("x", "b1", 4), waiting("y", "b2", 3)),
        granted=(),
    ),
    Case(
        "share_lends_idle_capacity_even_while_its_own_jobs_cannot_fit",
        queue(6, share("lender", 4, LEND), share("b", 2, BORROW)),
        (running("l1", "lender", 2), waiting("l2", "lender", 3, at=1), waiting("w", "b", 4, at=2)),
        granted=("w",),
    ),
    Case(
        "queue_capacity_is_never_exceeded",
        queue(4, share("b", 4, BORROW)),
        (running("r", "b", 3), waiting("w", "b", 2)),
        granted=(),
    ),
    Case(
        "job_may_only_use_units_its_share_has_a_limit_for",
        queue(4, share("a", 4, BORROW), tpu=4),
        (waiting("w", "a", 1, unit="tpu"),),
        granted=(),
        reasons={"w": QUOTA_MANAGEMENT_LIMIT_EXCEEDED},
    ),
    # -- who gets idle capacity ---------------------------------------------------------------------
    Case(
        "jobs_within_own_limit_go_before_borrowers",
        queue(4, share("a", 2, BORROW), share("b", 2, BORROW)),
        (waiting("borrower", "a", 4, at=0), waiting("own", "b", 2, at=1)),
        granted=("own",),
    ),
    Case(
        "borrowers_are_merged_across_shares_by_submission_order",
        queue(6, share("l", 4, LEND), share("a", 1, BORROW), share("b", 1, BORROW)),
        (
            running("a0", "a", 1),
            running("b0", "b", 1),
            waiting("b_first", "b", 3, at=1),
            waiting("a_second", "a", 3, at=2),
        ),
        granted=("b_first",),
    ),
    Case(
        "within_a_share_borrowers_keep_priority_order",
        queue(6, share("l", 4, LEND), share("a", 2, BORROW)),
        (
            running("a0", "a", 2),
            waiting("early_low", "a", 3, at=1),
            waiting("late_high", "a", 3, prio=5, at=2),
        ),
        granted=("late_high",),
    ),
    # -- reclaim (search 1) -------------------------------------------------------------------------
    Case(
        "lender_reclaims_from_borrower_regardless_of_priority",
        queue(4, share("lender", 2, LEND), share("b", 2, BORROW)),
        (running("x", "b", 4, prio=9000), waiting("mine", "lender", 2, prio=0, at=1)),
        preempted=(("mine", ("x",), "RECLAIM"),),
    ),
    Case(
        "reclaim_needs_no_in_share_preemption",
        queue(4, share("lender", 2, BORROW, preempt=False), share("b", 2, BORROW)),
        (running("x", "b", 3), waiting("mine", "lender", 2, at=1)),
        preempted=(("mine", ("x",), "RECLAIM"),),
    ),
    Case(
        "lenders_jobs_within_own_limit_are_never_another_shares_victims",
        queue(6, share("a", 3, BORROW), share("b", 3, LEND), share("c", 0, BORROW)),
        (
            running("a_own", "a", 3, prio=0),
            running("b1", "b", 1),
            running("c_borrowed", "c", 2, prio=9),
            waiting("w", "b", 2, at=5),
        ),
        preempted=(("w", ("c_borrowed",), "RECLAIM"),),
    ),
    Case(
        "reclaim_stops_taking_once_the_borrowing_share_is_within_its_limit",
        queue(6, share("lender", 3, LEND), share("b", 3, BORROW)),
        (
            running("b1", "b", 2, started=1),
            running("b2", "b", 2, started=2),
            running("b3", "b", 2, started=3),
            waiting("mine", "lender", 3, at=4),
        ),
        preempted=(("mine", ("b2", "b3"), "RECLAIM"),),
    ),
    Case(
        "reclaim_only_when_preemptor_share_is_below_its_own_limit",
        queue(6, share("a", 2, BORROW), share("b", 2, BORROW), share("l", 2, LEND)),
        (running("a1", "a", 2), running("x", "b", 4), waiting("w", "a", 1, at=1)),
        granted=(),
    ),
    Case(
        "reclaim_must_leave_the_preemptor_share_within_its_own_limit",
        queue(4, share("a", 2, BORROW), share("b", 2, BORROW)),
        (running("x", "b", 4), waiting("w", "a", 3, at=1)),
        granted=(),
    ),
    Case(
        "share_above_a_lowered_limit_is_not_preempted_for_that_alone",
        queue(4, share("a", 1, BORROW), share("b", 3, RESERVE)),
        (running("a_big", "a", 3), waiting("a_more", "a", 1, at=1)),
        granted=(),
    ),
    Case(
        "share_above_a_lowered_limit_is_first_to_go_when_another_share_reclaims",
        queue(4, share("a", 1, LEND), share("b", 3, RESERVE)),
        (running("a_big", "a", 3), running("b1", "b", 1), waiting("b2", "b", 2, at=1)),
        preempted=(("b2", ("a_big",), "RECLAIM"),),
    ),
    # -- in-share priority (search 2) -----------------------------------------------------------------
    Case(
        "in_share_preemption_takes_strictly_lower_priority_jobs",
        queue(2, share("a", 2, RESERVE, preempt=True)),
        (running("low", "a", 2, prio=1), waiting("high", "a", 2, prio=2, at=1)),
        preempted=(("high", ("low",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "in_share_preemption_never_takes_equal_priority_jobs",
        queue(2, share("a", 2, RESERVE, preempt=True)),
        (running("same", "a", 2, prio=5), waiting("w", "a", 2, prio=5, at=1)),
        granted=(),
    ),
    Case(
        "in_share_preemption_disabled_means_higher_priority_waits",
        queue(2, share("a", 2, RESERVE, preempt=False)),
        (running("low", "a", 2, prio=1), waiting("high", "a", 2, prio=9, at=1)),
        granted=(),
    ),
    Case(
        "in_share_preemptor_may_end_up_borrowing_within_its_ceiling",
        queue(4, share("a", 2, BORROW, preempt=True), share("l", 2, LEND)),
        (running("low", "a", 2, prio=1), running("l1", "l", 1), waiting("high", "a", 3, prio=5, at=1)),
        preempted=(("high", ("low",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "in_share_preemption_never_takes_other_shares_jobs",
        queue(4, share("a", 2, RESERVE, preempt=True), share("b", 2, RESERVE)),
        (running("a1", "a", 2, prio=5), running("b1", "b", 2, prio=0), waiting("w", "a", 2, prio=9, at=1)),
        preempted=(("w", ("a1",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "job_of_one_unit_never_preempts_another_units_jobs",
        queue(2, share("a", 2, RESERVE, preempt=True, tpu=2), tpu=2),
        (
            running("t", "a", 2, prio=0, unit="tpu"),
            running("g", "a", 1, prio=0),
            waiting("w", "a", 2, prio=9),
        ),
        preempted=(("w", ("g",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "preemption_that_cannot_make_the_job_fit_preempts_nothing",
        queue(4, share("a", 4, RESERVE, preempt=True)),
        (running("low", "a", 1, prio=0), running("high", "a", 3, prio=9), waiting("w", "a", 2, prio=5, at=1)),
        granted=(),
    ),
    # -- victim order -------------------------------------------------------------------------------------
    Case(
        "other_shares_jobs_are_taken_before_the_preemptors_own",
        queue(4, share("a", 2, BORROW, preempt=True), share("b", 2, BORROW)),
        (
            running("own_low", "a", 1, prio=0, started=5),
            running("b_over", "b", 3, prio=9, started=1),
            waiting("w", "a", 1, prio=5, at=6),
        ),
        preempted=(("w", ("b_over",), "RECLAIM"),),
    ),
    Case(
        "lowest_priority_is_taken_first",
        queue(2, share("a", 2, RESERVE, preempt=True)),
        (running("p1", "a", 1, prio=1), running("p2", "a", 1, prio=2), waiting("w", "a", 1, prio=5, at=1)),
        preempted=(("w", ("p1",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "most_recently_started_is_taken_first",
        queue(2, share("a", 2, RESERVE, preempt=True)),
        (
            running("old", "a", 1, started=1),
            running("new", "a", 1, started=2),
            waiting("w", "a", 1, prio=5, at=3),
        ),
        preempted=(("w", ("new",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "started_at_the_same_time_the_later_grant_is_taken_first",
        queue(2, share("a", 2, RESERVE, preempt=True)),
        (
            running("first", "a", 1, started=1, start_seq=1),
            running("second", "a", 1, started=1, start_seq=2),
            waiting("w", "a", 1, prio=5, at=3),
        ),
        preempted=(("w", ("second",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "started_together_the_most_recently_submitted_is_taken_first",
        queue(2, share("a", 2, RESERVE, preempt=True)),
        (
            running("older", "a", 1, at=0, started=2),
            running("newer", "a", 1, at=1, started=2),
            waiting("w", "a", 1, prio=5, at=3),
        ),
        preempted=(("w", ("newer",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "victim_set_is_minimized_from_last_to_first",
        queue(3, share("a", 3, RESERVE, preempt=True)),
        (
            running("small", "a", 1, prio=0),
            running("big", "a", 2, prio=1),
            waiting("w", "a", 2, prio=5, at=1),
        ),
        preempted=(("w", ("big",), "IN_SHARE_PRIORITY"),),
    ),
    # -- two-phase preemption ---------------------------------------------------------------------------
    Case(
        "victims_units_go_to_their_preemptor_and_nobody_else",
        queue(4, share("lender", 2, LEND), share("b", 2, BORROW)),
        (
            running("x", "b", 2, stopping_for="mine"),
            running("b1", "b", 2),
            waiting("mine", "lender", 2, at=1, awaiting={"x": 2}),
            waiting("b2", "b", 2, at=0),
        ),
        granted=(),
    ),
    Case(
        "job_being_stopped_is_not_chosen_again_for_another_preemptor",
        queue(4, share("a", 4, RESERVE, preempt=True)),
        (
            running("x", "a", 2, prio=0, stopping_for="p1"),
            running("y", "a", 2, prio=8),
            waiting("p1", "a", 2, prio=5, at=1, awaiting={"x": 2}),
            waiting("p2", "a", 2, prio=9, at=2),
        ),
        preempted=(("p2", ("y",), "IN_SHARE_PRIORITY"),),
    ),
    Case(
        "a_stop_whose_preemptor_is_gone_is_promised_to_the_next_job_instead_of_a_preemption",
        queue(4, share("a", 4, RESERVE, preempt=True)),
        (
            running("orphan", "a", 2, prio=9, stopping_for="gone"),
            running("low", "a", 2, prio=0),
            waiting("p", "a", 2, prio=5, at=1),
        ),
        promised=(("p", ("orphan",)),),
        reasons={"p": "Waiting for the units it was promised of 1 stop(s) under way to be released: orphan"},
    ),
    Case(
        "a_terminated_jobs_units_are_promised_without_in_share_preemption",
        queue(2, share("a", 2, RESERVE)),
        (running("orphan", "a", 2, stop_cause=StopCause.TERMINATED), waiting("p", "a", 2, at=1)),
        promised=(("p", ("orphan",)),),
        reasons={
            "p": "Waiting for the units it was promised of 1 stop(s) under way to be released: orphan "
            "(being terminated)"
        },
    ),
    Case(
        "preemptor_is_granted_once_its_victims_have_stopped",
        queue(2, share("a", 2, RESERVE, preempt=True)),
        (waiting("p", "a", 2, prio=5, at=1, awaiting={"gone": 2}), waiting("older", "a", 2, at=0)),
        granted=("p",),
    ),
    Case(
        "a_reservation_made_before_the_capacity_was_lowered_waits_until_the_queue_physically_has_it",
        queue(3, share("a", 3, RESERVE, preempt=True)),
        (
            running("r1", "a", 1),
            running("r2", "a", 1),
            waiting("p", "a", 2, prio=5, at=1, awaiting={"gone": 2}),
        ),
        granted=(),
        reasons={
            "p": "Waiting for its 2 gpu: its preempted jobs have stopped, but the job queue now has 3 gpu "
            "and 4 are held or promised (its capacity was lowered since); it starts as others release theirs"
        },
    ),
    Case(
        "a_reservation_made_before_the_capacity_was_lowered_is_granted_once_enough_is_released",
        queue(3, share("a", 3, RESERVE, preempt=True)),
        (running("r1", "a", 1), waiting("p", "a", 2, prio=5, at=1, awaiting={"gone": 2})),
        granted=("p",),
    ),
    Case(
        # It stopped for "p", ran again and is being stopped for "q": "p" waits for its own victims only.
        "a_victim_that_stopped_and_is_stopping_again_for_another_preemptor_is_that_ones_alone",
        queue(4, share("a", 4, RESERVE, preempt=True)),
        (
            running("again", "a", 1, prio=0, stopping_for="q"),
            running("low", "a", 1, prio=0, stopping_for="p"),
            waiting("p", "a", 2, prio=5, at=1, awaiting={"again": 1, "low": 1}),
            waiting("q", "a", 1, prio=6, at=2, awaiting={"again": 1}),
        ),
        granted=(),
        reasons={
            "p": "Waiting for 1 preempted job(s) to stop: low",
            "q": "Waiting for 1 preempted job(s) to stop: again",
        },
    ),
    Case(
        "a_preemptor_is_granted_when_its_own_victims_have_stopped_while_an_earlier_one_stops_for_another",
        queue(4, share("a", 4, RESERVE, preempt=True)),
        (
            running("again", "a", 1, prio=0, stopping_for="q"),
            running("r", "a", 1, prio=0),
            waiting("p", "a", 2, prio=5, at=1, awaiting={"again": 1, "gone": 1}),
            waiting("q", "a", 1, prio=6, at=2, awaiting={"again": 1}),
        ),
        granted=("p",),
    ),
    Case(
        "preemptor_with_a_reservation_counts_in_its_share",
        queue(4, share("a", 2, RESERVE, preempt=True), share("l", 2, LEND)),
        (
            running("low", "a", 2, prio=0, stopping_for="p"),
            waiting("p", "a", 2, prio=5, at=1, awaiting={"low": 2}),
            waiting("other", "a", 1, prio=1, at=2),
        ),
        granted=(),
    ),
    # -- a cycle never preempts a job it granted ----------------------------------------------------------
    Case(
        "a_higher_priority_job_that_can_preempt_goes_before_a_lower_priority_one_that_fits",
        queue(4, share("a", 4, RESERVE, preempt=True)),
        (
            running("r", "a", 2, prio=0),
            waiting("high", "a", 4, prio=9, at=1),  # past the share's free units, but it can preempt r
            waiting("low", "a", 2, prio=1, at=2),  # fits, but high comes first in its share
        ),
        preempted=(("high", ("r",), "IN_SHARE_PRIORITY"),),
        reasons={"low": "Waiting for capacity: this job needs 2 gpu, more than quota share a has free"},
    ),
    Case(
        "a_borrower_is_not_granted_units_its_lender_takes_back_in_the_same_cycle",
        queue(4, share("l", 2, LEND, preempt=True), share("b", 2, BORROW)),
        (
            running("l0", "l", 1, prio=0),
            waiting("b1", "b", 3, at=1),  # borrows l's idle unit
            waiting("l1", "l", 2, prio=5, at=2),  # would reclaim b1 and stop l0
        ),
        preempted=(("l1", ("l0",), "IN_SHARE_PRIORITY"),),
        reasons={"b1": WITHHELD + "l1"},
    ),
    Case(
        "a_higher_priority_job_that_can_borrow_goes_before_a_lower_priority_one_within_its_limit",
        queue(4, share("a", 2, BORROW, preempt=True), share("l", 2, LEND)),
        (waiting("high", "a", 3, prio=9, at=1), waiting("low", "a", 2, prio=1, at=2)),
        granted=("high",),
        reasons={"low": "Waiting for capacity to borrow: this job needs 2 gpu"},
    ),
    Case(
        "a_reservation_granted_in_a_cycle_is_not_reclaimed_in_it",
        queue(4, share("a", 2, BORROW, preempt=True), share("l", 2, LEND)),
        (waiting("p", "a", 3, prio=9, at=0, awaiting={"gone": 3}), waiting("l1", "l", 2, at=1)),
        granted=("p",),
        reasons={"l1": "Waiting for capacity: this job needs 2 gpu, within what quota share l has free"},
    ),
    # -- status reasons -----------------------------------------------------------------------------------
    Case(
        "more_than_the_queue_has_is_service_environment_max_resource",
        queue(4, share("a", 4, BORROW)),
        (waiting("w", "a", 5),),
        reasons={"w": SERVICE_ENVIRONMENT_MAX_RESOURCE},
    ),
    Case(
        "a_unit_the_queue_lacks_is_service_environment_max_resource_even_if_the_share_lacks_it_too",
        queue(4, share("a", 4, BORROW)),
        (waiting("w", "a", 1, unit="tpu"),),
        reasons={"w": SERVICE_ENVIRONMENT_MAX_RESOURCE},
    ),
    Case(
        "more_than_the_share_can_ever_hold_is_quota_management_limit_exceeded",
        queue(8, share("a", 2, BORROW, borrow=100), share("l", 6, LEND)),
        (waiting("w", "a", 5),),
        reasons={"w": QUOTA_MANAGEMENT_LIMIT_EXCEEDED},
    ),
    Case(
        "a_job_that_can_never_fit_blocks_nobody",
        queue(4, share("a", 4, RESERVE)),
        (waiting("never", "a", 9, prio=9, at=0), waiting("fine", "a", 4, at=1)),
        granted=("fine",),
        reasons={"never": SERVICE_ENVIRONMENT_MAX_RESOURCE},
    ),
    Case(
        "a_waiting_job_says_in_plain_words_what_it_waits_for",
        queue(2, share("a", 2, RESERVE)),
        (running("r", "a", 2), waiting("w", "a", 1, at=1)),
        reasons={"w": "Waiting for capacity: this job needs 1 gpu, more than quota share a has free of its"},
    ),
    # -- what holds the capacity a waiting job needs -------------------------------------------------------
    Case(
        "an_idle_unit_of_a_reserve_share_is_named_as_never_lent_to_a_job_that_would_borrow",
        queue(4, share("vision", 2, RESERVE), share("research", 2, BORROW)),
        (running("v", "vision", 1), running("r", "research", 2), waiting("w", "research", 1, at=1)),
        reasons={
            "w": "Waiting for capacity to borrow: this job needs 1 gpu, more than quota share research has "
            "free of its own 2; 0 can be borrowed now. Held by vision, research; idle: 1 of vision (RESERVE, "
            "never lent)"
        },
    ),
    Case(
        "another_share_borrowing_within_its_limit_is_named_as_borrowing",
        queue(
            5, share("a", 2, BORROW), share("r", 1, RESERVE), share("l", 1, LEND), share("b", 1, borrow=100)
        ),
        (running("a1", "a", 2), running("b1", "b", 2), waiting("w", "a", 1, at=1)),
        reasons={
            "w": "Waiting for capacity to borrow: this job needs 1 gpu, more than quota share a has free of "
            "its own 2; 0 can be borrowed now. Held by a, b (borrowing within its limit); idle: 1 of r "
            "(RESERVE, never lent)"
        },
    ),
    Case(
        "a_full_queue_says_so_and_who_holds_it",
        queue(4, share("a", 2, RESERVE), share("b", 2, BORROW)),
        (running("a1", "a", 2), running("b1", "b", 2), waiting("w", "b", 1, at=1)),
        reasons={
            "w": "Waiting for capacity to borrow: this job needs 1 gpu, more than quota share b has free of "
            "its own 2; 0 can be borrowed now. The queue is full, held by a, b"
        },
    ),
    Case(
        "a_share_that_does_not_borrow_waits_for_its_own_jobs_holding_its_limit",
        queue(4, share("a", 2, RESERVE), share("b", 2, BORROW)),
        (running("a1", "a", 2), waiting("w", "a", 1, at=1)),
        reasons={
            "w": "Waiting for capacity: this job needs 1 gpu, more than quota share a has free of its own 2; "
            "a RESERVE share does not borrow: it waits for its own jobs to finish"
        },
    ),
    Case(
        "a_share_at_its_borrow_ceiling_waits_for_its_own_jobs",
        queue(4, share("a", 2, BORROW, borrow=50), share("l", 2, LEND)),
        (running("a1", "a", 3), waiting("w", "a", 1, at=1)),
        reasons={
            "w": "Waiting for capacity: this job needs 1 gpu, which would take quota share a past its borrow "
            "ceiling of 3: it waits for its own jobs to finish"
        },
    ),
    Case(
        "spare_units_of_a_stop_under_way_are_promised_and_named_in_the_reason",
        queue(3, share("l", 2, LEND), share("b", 1, BORROW)),
        (
            running("b1", "b", 1),
            running("b2", "b", 2, stopping_for="l1"),
            waiting("l1", "l", 1, at=1, awaiting={"b2": 1}),
            waiting("l2", "l", 1, at=2),
        ),
        promised=(("l2", ("b2",)),),
        reasons={
            "l2": "Waiting for the units it was promised of 1 stop(s) under way to be released: b2 (being "
            "stopped for l1)"
        },
    ),
    Case(
        "a_preemptor_waiting_for_its_victims_names_them",
        queue(2, share("a", 2, RESERVE, preempt=True)),
        (
            running("low", "a", 2, stopping_for="p"),
            waiting("p", "a", 2, prio=5, at=1, awaiting={"low": 2}),
        ),
        reasons={"p": "Waiting for 1 preempted job(s) to stop: low"},
    ),
    Case(
        # a's terminated job has 2 spare units: a's own waiting job is promised one (its share counts it
        # once), b's preemptor the other with the idle unit; nobody is preempted, c's borrower waits.
        "spare_units_of_a_stop_go_to_the_next_jobs_that_fit_with_them_and_nobody_is_preempted",
        queue(5, share("a", 2, LEND), share("b", 2, BORROW), share("c", 1, BORROW)),
        (
            running("term", "a", 2, stop_cause=StopCause.TERMINATED),
            running("c1", "c", 1),
            running("c2", "c", 1, start_seq=1),
            waiting("p", "b", 2, at=1),
            waiting("w", "a", 1, at=2),
            waiting("x", "c", 1, at=3),
        ),
        promised=(("w", ("term",)), ("p", ("term",))),
    ),
    Case(
        "a_disabled_shares_existing_jobs_still_start_and_it_still_lends",
        queue(4, share("off", 2, LEND, disabled=True), share("b", 2, BORROW)),
        (waiting("old", "off", 1), waiting("w", "b", 3, at=1)),
        granted=("old", "w"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.rule for case in CASES])
def test_rule(case: Case) -> None:
    plan = plan_cycle(state(case.queue, *case.jobs), now=100.0)

    assert summarize(plan.decisions) == Summary(case.granted, case.preempted, case.promised)
    for job_id, reason in case.reasons.items():
        assert plan.state.jobs[job_id].status_reason.startswith(reason), plan.state.jobs[job_id].status_reason


FULL = (
    "Waiting for capacity: this job needs 1 gpu, more than quota share a has free of its own 2; a RESERVE "
    "share does not borrow: it waits for its own jobs to finish"
)
TWELVE_WAITING = tuple(waiting(f"w{index:02}", "a", 1, at=index) for index in range(12))


PLACES = [
    ("the_first_waiting_job_of_its_share_says_nothing_of_others", TWELVE_WAITING, "w00", FULL),
    ("the_second_names_the_first", TWELVE_WAITING, "w01", FULL + "; behind w00 of its share"),
    (
        "the_fifth_counts_the_four_ahead",
        TWELVE_WAITING,
        "w04",
        FULL + "; behind 4 waiting jobs of share a, first w00",
    ),
    (
        "from_five_ahead_it_says_5_or_more_and_names_no_job",
        TWELVE_WAITING,
        "w05",
        FULL + "; behind 5+ waiting jobs of share a",
    ),
    (
        "the_last_says_5_or_more_too",
        TWELVE_WAITING,
        "w11",
        FULL + "; behind 5+ waiting jobs of share a",
    ),
    (
        "the_share_order_is_priority_first",
        (waiting("early", "a", 1, at=1), waiting("urgent", "a", 1, prio=5, at=2)),
        "early",
        FULL + "; behind urgent of its share",
    ),
    (
        "a_job_waiting_for_another_unit_is_not_ahead",
        (waiting("tpu-job", "a", 1, at=0, unit="tpu"), waiting("w", "a", 1, at=1)),
        "w",
        FULL,
    ),
    (
        "a_job_granted_in_the_cycle_is_not_ahead",
        (
            waiting("big", "a", 2, prio=9, at=0, unit="tpu"),
            waiting("w", "a", 1, at=1, unit="tpu"),
            waiting("x", "a", 1, at=2, unit="tpu"),
        ),
        "x",
        FULL.replace("gpu", "tpu") + "; behind w of its share",
    ),
]


@pytest.mark.parametrize(("jobs", "job_id", "reason"), [pytest.param(*row[1:], id=row[0]) for row in PLACES])
def test_a_waiting_job_says_its_place_in_its_share_and_who_comes_first(
    jobs: tuple[Job, ...], job_id: str, reason: str
) -> None:
    a_full_share = queue(2, share("a", 2, RESERVE, tpu=2), tpu=2)
    plan = plan_cycle(state(a_full_share, running("r", "a", 2), *jobs), now=100.0)

    assert plan.state.jobs[job_id].status_reason == reason


@pytest.mark.parametrize(
    ("strategy", "reason"),
    [
        pytest.param(
            LEND,
            "Waiting for capacity: this job needs 1 gpu, within what quota share l has free of its own 2; "
            "its free units are lent (to b) or held by jobs being stopped",
            id="a_lenders_free_units_name_the_borrowers_using_them",
        ),
        pytest.param(
            RESERVE,
            "Waiting for capacity: this job needs 1 gpu, within what quota share l has free of its own 2; "
            "its free units are held by jobs being stopped",
            id="a_reserve_shares_free_units_are_never_said_to_be_lent",
        ),
    ],
)
def test_free_units_of_its_own_name_what_holds_them(strategy: SharingStrategy, reason: str) -> None:
    # Such a wait follows a configuration change or comes before a reclaim: the words are read from the
    # usage as it is, without a cycle (which would reclaim).
    lender_queue = queue(4, share("l", 2, strategy), share("b", 2, BORROW))
    usage = Usage(lender_queue, [running("b1", "b", 4)])

    assert WaitingReasons(usage, {"gpu": 1}).reason(lender_queue.shares[0], "gpu", 1) == reason


def test_rule_ids_are_unique() -> None:
    assert len({case.rule for case in CASES}) == len(CASES)


def test_granted_job_is_scheduled_with_an_empty_reason_and_a_start_order() -> None:
    plan = plan_cycle(state(queue(2, share("a", 2, RESERVE)), waiting("w", "a", 1)), now=7.0)

    job = plan.state.jobs["w"]
    assert (job.status, job.status_reason, job.started) == (JobStatus.SCHEDULED, "", (7.0, 1))


def test_grant_reports_how_many_units_are_borrowed() -> None:
    plan = plan_cycle(
        state(queue(4, share("a", 1, BORROW), share("l", 3, LEND)), waiting("w", "a", 3)), now=0
    )

    assert plan.decisions == (Grant("w", "gpu", 3, borrowed=2),)


def test_victims_keep_their_status_until_the_stop_completes_and_say_who_preempted_them() -> None:
    snapshot = state(
        queue(2, share("a", 2, RESERVE, preempt=True)),
        running("low", "a", 2, prio=0),
        waiting("high", "a", 2, prio=9, at=1),
    )

    victim = plan_cycle(snapshot, now=5).state.jobs["low"]

    assert (victim.status, victim.stop_cause, victim.preempted_by) == (
        JobStatus.RUNNING,
        StopCause.PREEMPTED,
        "high",
    )
    assert "preempted by high" in victim.status_reason


def test_a_preempted_job_is_not_admitted_again_in_the_cycle_that_preempted_it() -> None:
    snapshot = state(
        queue(4, share("a", 2, RESERVE, preempt=True), share("b", 2, BORROW)),
        running("low", "a", 2, prio=0),
        waiting("high", "a", 2, prio=9, at=1),
    )

    plan = plan_cycle(snapshot, now=5)

    assert [d.job_id for d in plan.decisions if isinstance(d, Grant)] == []
    assert plan.state.jobs["low"].status is JobStatus.RUNNING and plan.state.jobs["low"].stop_cause


def test_same_state_gives_the_same_decisions_whatever_the_order_of_the_jobs() -> None:
    jobs = [
        running("x", "b", 3, prio=2, started=1),
        running("y", "b", 1, prio=2, started=1),
        waiting("m", "lender", 2, at=3),
        waiting("n", "b", 1, prio=7, at=4),
        waiting("o", "lender", 1, at=3),
    ]
    q = queue(4, share("lender", 2, LEND), share("b", 2, BORROW, preempt=True))

    forward = plan_cycle(state(q, *jobs), now=10)
    backward = plan_cycle(state(q, *reversed(jobs)), now=10)

    assert forward.decisions == backward.decisions
    assert forward.state.jobs == backward.state.jobs


@pytest.mark.parametrize(
    "order",
    [("j1", "j2", "j3", "j4"), ("j2", "j1", "j4", "j3"), ("j4", "j3", "j2", "j1"), ("j1", "j3", "j2", "j4")],
)
def test_jobs_with_one_submission_key_go_by_job_id_whatever_their_order(order: tuple[str, ...]) -> None:
    # One submission key for all four: the job id decides. The planner takes jobs that come in submission
    # order without sorting them (a tie is in order only while the ids grow), and sorts any other order.
    q = queue(1, share("a", 1, RESERVE))
    jobs = {job_id: waiting(job_id, "a", 1, at=1, seq=1) for job_id in order}
    reference = plan_cycle(state(q, *(jobs[job_id] for job_id in ("j1", "j2", "j3", "j4"))), now=5)

    plan = plan_cycle(state(q, *jobs.values()), now=5)

    assert summarize(plan.decisions).granted == ("j1",)
    assert plan.decisions == reference.decisions
    assert plan.state.jobs == reference.state.jobs
    assert "behind" not in plan.state.jobs["j2"].status_reason
    assert plan.state.jobs["j4"].status_reason.endswith("behind 2 waiting jobs of share a, first j2")
