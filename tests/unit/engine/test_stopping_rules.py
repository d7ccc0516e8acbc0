"""The rules that hold while jobs are being stopped, and priority order inside a share, as small stories.

Each test plays a story a user would recognise over several cycles (decisions, then stops completing),
and its name states the rule it checks.
"""

from __future__ import annotations

from airflow_quota.engine.lifecycle import complete_stop, submit_job
from airflow_quota.engine.model import JobQueue, JobRequest, JobStatus, QueueState, StopCause
from airflow_quota.engine.planner import plan_cycle
from airflow_quota.engine.usage import Usage
from airflow_quota.ledger.job_rows import awaited_stops
from tests.unit.engine.builders import (
    BORROW,
    LEND,
    RESERVE,
    Summary,
    running,
    share,
    state,
    summarize,
    waiting,
)


def _submit(
    snapshot: QueueState, job_id: str, share_name: str, count: int, priority: int, at: float
) -> QueueState:
    return submit_job(snapshot, job_id, JobRequest(job_id, share_name, "gpu", count, priority), at)


def _holds(snapshot: QueueState, share_name: str) -> int:
    """What the share holds now: its jobs holding capacity (being stopped included) and reservations."""
    return Usage(snapshot.queue, snapshot.jobs.values()).usage(share_name, "gpu")


def test_a_reserve_share_never_holds_more_than_its_limit_while_its_own_job_stops() -> None:
    queue = JobQueue(
        "q14",
        {"gpu": 14},
        (share("llm", 8, RESERVE), share("recsys", 4, RESERVE, preempt=True), share("safety", 2, RESERVE)),
    )
    snapshot = state(
        queue,
        running("llm-1", "llm", 8),
        running("rec-a", "recsys", 4, prio=50),
        waiting("rec-b", "recsys", 4, prio=40, at=10),
        waiting("rec-c", "recsys", 2, prio=30, at=20),
    )
    snapshot = _submit(snapshot, "rec-urgent", "recsys", 2, 90, at=1000)

    plan = plan_cycle(snapshot, now=1000)

    # rec-urgent preempts rec-a; rec-c is promised rec-a's two spare units, not granted on others' reserve.
    assert summarize(plan.decisions) == Summary(
        granted=(),
        preempted=(("rec-urgent", ("rec-a",), "IN_SHARE_PRIORITY"),),
        promised=(("rec-c", ("rec-a",)),),
    )
    assert _holds(plan.state, "recsys") == 4, "rec-a (stopping) holds 4: recsys is at its limit, not above"
    assert plan.state.jobs["rec-c"].status_reason.startswith("Waiting for the units it was promised")

    # safety's job, within its own limit, starts at once: nobody landed on its reserve.
    snapshot = _submit(plan.state, "saf-x", "safety", 2, 0, at=1010)
    plan = plan_cycle(snapshot, now=1010)
    assert summarize(plan.decisions) == Summary(granted=("saf-x",), preempted=())

    # Once rec-a has stopped, rec-urgent and rec-c start on its 4 units; rec-b waits for its share.
    plan = plan_cycle(complete_stop(plan.state, "rec-a"), now=1060)
    assert summarize(plan.decisions) == Summary(granted=("rec-c", "rec-urgent"), preempted=())
    assert _holds(plan.state, "recsys") == 4


def test_a_job_waits_for_the_spare_units_of_a_stop_under_way_instead_of_preempting_another() -> None:
    queue = JobQueue("q", {"gpu": 3}, (share("team", 3, RESERVE, preempt=True),))
    snapshot = state(queue, running("j1", "team", 2, prio=0, at=0), running("j2", "team", 1, prio=1, at=0))
    snapshot = _submit(snapshot, "j3", "team", 1, 1, at=1)
    plan = plan_cycle(snapshot, now=1)
    assert summarize(plan.decisions) == Summary((), (("j3", ("j1",), "IN_SHARE_PRIORITY"),))

    plan = plan_cycle(_submit(plan.state, "j4", "team", 1, 2, at=2), now=2)

    assert summarize(plan.decisions) == Summary((), (), promised=(("j4", ("j1",)),)), "j2 is not preempted"
    assert plan.state.jobs["j2"].stop_cause is None
    assert "j1 (being stopped for j3)" in plan.state.jobs["j4"].status_reason
    # j1's stop ends at t=3: j3 and j4 start together on its two units.
    plan = plan_cycle(complete_stop(plan.state, "j1"), now=3)
    assert summarize(plan.decisions) == Summary(granted=("j3", "j4"), preempted=())


def test_a_lender_waits_for_the_spare_units_of_a_reclaim_under_way_instead_of_reclaiming_again() -> None:
    queue = JobQueue("q", {"gpu": 3}, (share("lender", 3, BORROW), share("borrower", 0, BORROW)))
    snapshot = state(
        queue,
        running("b1", "borrower", 2, prio=0, started=5),
        running("b2", "borrower", 1, prio=5, started=1),
    )
    plan = plan_cycle(_submit(snapshot, "l1", "lender", 1, 0, at=10), now=10)
    assert summarize(plan.decisions) == Summary((), (("l1", ("b1",), "RECLAIM"),))

    plan = plan_cycle(_submit(plan.state, "l2", "lender", 1, 0, at=11), now=11)

    assert summarize(plan.decisions) == Summary((), (), promised=(("l2", ("b1",)),)), "b2 keeps running"
    plan = plan_cycle(complete_stop(plan.state, "b1"), now=12)
    assert summarize(plan.decisions) == Summary(granted=("l1", "l2"), preempted=())
    assert plan.state.jobs["b2"].status is JobStatus.RUNNING


def test_a_lower_priority_job_within_the_limit_does_not_shut_out_a_higher_priority_borrower() -> None:
    queue = JobQueue("q9", {"gpu": 8}, (share("team", 4, BORROW, borrow=100),))
    snapshot = state(
        queue,
        running("j2", "team", 3),
        waiting("j0", "team", 5, prio=6, at=1),
        waiting("j10", "team", 1, prio=3, at=2),
        waiting("j3", "team", 4, prio=4, at=3),
    )

    plan = plan_cycle(snapshot, now=10)

    assert summarize(plan.decisions) == Summary(granted=("j0",), preempted=())
    assert {plan.state.jobs[job_id].status for job_id in ("j10", "j3")} == {JobStatus.RUNNABLE}


def test_a_later_job_of_a_share_starts_first_when_the_earlier_one_cannot_start_now() -> None:
    queue = JobQueue("q", {"gpu": 6}, (share("team", 4, BORROW, borrow=0), share("other", 2, RESERVE)))
    snapshot = state(
        queue,
        running("r", "team", 3),
        waiting("big", "team", 2, prio=9, at=1),  # past its ceiling of 4: cannot start now
        waiting("small", "team", 1, prio=1, at=2),
    )

    plan = plan_cycle(snapshot, now=10)

    assert summarize(plan.decisions) == Summary(granted=("small",), preempted=())


def test_a_preemptor_counts_only_the_units_its_own_shares_stops_will_really_give_it() -> None:
    # s1's j6 stops for j9 with 1 spare unit. j8 could take it with s0's j1 as a victim, but j1's 2 units
    # go to j8 first (a victim's units go to its preemptor), so the spare unit stays unused and s1 would
    # hold 5 of its 4 counting j6: j8 must wait instead (Hypothesis found it).
    queue = JobQueue("q", {"gpu": 5}, (share("s0", 1, BORROW), share("s1", 4, LEND, preempt=True)))
    snapshot = state(
        queue,
        running("j6", "s1", 3, prio=0, stopping_for="j9"),
        running("j1", "s0", 2, started=1),
        waiting("j9", "s1", 2, prio=1, at=10, awaiting={"j6": 2}),
        waiting("j8", "s1", 2, prio=0, at=9),
    )

    plan = plan_cycle(snapshot, now=11)

    assert summarize(plan.decisions) == Summary((), ())
    assert _holds(plan.state, "s1") == 3, "j6 (stopping) 3 and j9's 2 from it"


def test_a_promise_is_kept_as_made_when_a_later_promise_could_take_its_units_in_turn_order() -> None:
    # a's terminated job "s" has 3 spare units, b's "t" 1, and 1 unit is idle. Step 2 promises a's "ra"
    # 2 of s's units (its own share's: a counts them once, 5 of its ceiling 5); step 3 then promises b's
    # higher-priority "rb" t's unit, s's last one and the idle one. Worked out again in priority order,
    # rb would take 2 of s's units and leave ra 1: a would hold 6 of its 5 (Hypothesis found the kind).
    queue = JobQueue("q", {"gpu": 9}, (share("a", 4, BORROW, borrow=25), share("b", 4, BORROW, borrow=50)))
    snapshot = state(
        queue,
        running("s", "a", 3, stop_cause=StopCause.TERMINATED),
        running("a1", "a", 2),
        running("t", "b", 1, stop_cause=StopCause.TERMINATED),
        running("b1", "b", 2),
        waiting("ra", "a", 2, prio=0, at=1),
        waiting("rb", "b", 3, prio=9, at=2),
    )

    plan = plan_cycle(snapshot, now=3)

    assert summarize(plan.decisions) == Summary((), (), promised=(("ra", ("s",)), ("rb", ("s", "t"))))
    assert plan.state.jobs["ra"].awaiting_victims == {"s": 2}
    assert plan.state.jobs["rb"].awaiting_victims == {"t": 1, "s": 1}
    assert _holds(plan.state, "a") == 5, "s 3 and a1 2 (ra's 2 come from s): a at its ceiling"
    following = plan_cycle(plan.state, now=4)
    assert following.decisions == ()
    assert _holds(following.state, "a") == 5, "the split kept: rb does not take ra's units of s"
    # When s has stopped, ra and rb are granted what they were promised; nothing is counted twice.
    stopped = complete_stop(complete_stop(following.state, "s"), "t")
    assert summarize(plan_cycle(stopped, now=5).decisions).granted == ("ra", "rb")


def test_a_ledger_written_before_splits_were_kept_is_split_again_in_turn_order() -> None:
    # A reservation read from such a ledger lists each stop with its whole count (job_rows.awaited_stops).
    assert awaited_stops(["x", "y"], 2) == {"x": 2, "y": 2}
    queue = JobQueue("q", {"gpu": 4}, (share("a", 4, RESERVE, preempt=True),))
    snapshot = state(
        queue,
        running("x", "a", 3, prio=0, stopping_for="p"),
        running("r", "a", 1, prio=9),
        waiting("p", "a", 2, prio=5, at=1, awaiting=awaited_stops(["x"], 2)),
        waiting("q", "a", 1, prio=1, at=2, awaiting=awaited_stops(["x"], 1)),
    )

    plan = plan_cycle(snapshot, now=3)

    assert plan.decisions == ()
    assert _holds(plan.state, "a") == 4, "x 3 and r 1; p takes 2 of x's units, q the last one"
    assert plan.state.jobs["q"].status_reason.endswith("x (being stopped for p)")


def test_a_preemptor_gets_its_units_when_its_victim_stops_though_a_promise_shared_that_stop() -> None:
    # The queue was lowered from 8 to 6 gpu while 8 are held. s1's j21 reclaims j16 (3 units, 1 of them
    # for j21: the queue lost the other 2); s2's j17 is promised j16's spare unit, waiting for the
    # terminated j5 too (their stops free the room it needs). Once j16 has stopped, j17's unit comes from
    # j5, which it still awaits, and j21 is granted: its preemption pays off (Hypothesis found it).
    queue = JobQueue(
        "q",
        {"gpu": 6},
        (
            share("s0", 0, BORROW, borrow=100),
            share("s1", 1, LEND),
            share("s2", 2, BORROW, preempt=True),
            share("s3", 3, BORROW),
        ),
    )
    snapshot = state(
        queue,
        running("j4", "s0", 1, at=8),
        running("j15", "s3", 3, at=29),
        running("j16", "s2", 3, at=31),
        running("j5", "s2", 1, at=13, stop_cause=StopCause.TERMINATED),
        waiting("j17", "s2", 1, prio=2, at=33),
        waiting("j21", "s1", 1, prio=2, at=38),
    )

    plan = plan_cycle(snapshot, now=41)

    assert summarize(plan.decisions) == Summary(
        (), (("j21", ("j16",), "RECLAIM"),), promised=(("j17", ("j16", "j5")),)
    )
    assert plan.state.jobs["j17"].awaiting_victims == {"j16": 1, "j5": 0}, "j5 frees room, gives nothing"
    following = plan_cycle(complete_stop(plan.state, "j16"), now=42)
    assert summarize(following.decisions).granted == ("j21",)
    assert following.state.jobs["j17"].awaiting_victims == {"j5": 1}, "its unit now comes from j5"
