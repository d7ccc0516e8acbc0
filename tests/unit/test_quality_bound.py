"""The allocation-quality benchmark's bound under a quota file's caps, on small hand-computed cases.

For every set S of shares with jobs, S's jobs hold at most cap(S) units at once, so no scheduler that keeps
the sharing rules ends before t + (S's work submitted from t on) / cap(S), for any submission time t; the
bound is the largest of those and of the longest job's submission + duration. Every job below runs 100 s
unless said otherwise, and the work is in unit-seconds.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_quota.engine.model import JobRequest
from airflow_quota.sim.scenario import QueueConfiguration, ScenarioEvent, SubmitJob
from airflow_quota.sim.trace import load_queue_configuration, load_trace
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
UNIT = "ml.p4d.24xlarge"
OTHER_UNIT = "ml.p5.48xlarge"


bench = load_script("benchmarks/allocation_quality.py")


def share(
    name: str, strategy: str, own: int | dict[str, int], borrow_limit: int | None = None
) -> dict[str, Any]:
    limits = own if isinstance(own, dict) else {UNIT: own}
    sharing: dict[str, Any] = {"strategy": strategy}
    if borrow_limit is not None:
        sharing["borrowLimit"] = borrow_limit
    return {
        "quotaShareName": name,
        "capacityLimits": [{"capacityUnit": unit, "maxCapacity": count} for unit, count in limits.items()],
        "resourceSharingConfiguration": sharing,
    }


def configuration(capacity: int | dict[str, int], *shares: dict[str, Any]) -> QueueConfiguration:
    limits = capacity if isinstance(capacity, dict) else {UNIT: capacity}
    queue = {
        "jobQueueName": "q",
        "capacityLimits": [{"capacityUnit": unit, "maxCapacity": count} for unit, count in limits.items()],
    }
    return QueueConfiguration.parse(queue, list(shares), "test")


@dataclass(frozen=True)
class Jobs:
    """``repeat`` jobs of ``share``, each ``count`` instances for ``duration`` s, submitted at ``at``."""

    share: str
    at: float
    count: int
    repeat: int = 1
    duration: float = 100.0
    unit: str = UNIT


def events(*groups: Jobs) -> tuple[ScenarioEvent, ...]:
    result = []
    for group in groups:
        for _ in range(group.repeat):
            index = len(result)
            request = JobRequest(f"job-{index}", group.share, group.unit, group.count)
            result.append(ScenarioEvent(index, group.at, SubmitJob(request, group.duration)))
    return tuple(result)


@dataclass(frozen=True)
class Case:
    name: str
    config: QueueConfiguration
    jobs: tuple[ScenarioEvent, ...]
    #: Seconds from the first submission (0 in every case).
    expected: float
    #: The shares (and unit) that set it; () for the longest job.
    set_by: tuple[str, ...]
    #: The plain work-conserving bound (all jobs over the whole capacity, every unit added up).
    plain: float


CASES = [
    Case(
        "a RESERVE share's capacity serves only its own jobs",
        # team: min(8 - prod's 4, unlimited) = 4 units for 800 unit-seconds; the whole queue: 100 s
        configuration(8, share("prod", "RESERVE", 4), share("team", "LEND_AND_BORROW", 4)),
        events(Jobs("team", 0, 4, repeat=2)),
        expected=200,
        set_by=("team",),
        plain=100,
    ),
    Case(
        "an unlimited borrower can use everything but other shares' reserved capacity",
        # vision: 12 - prod's 4 = 8 units (eval's 4 lent included) for 1,600 unit-seconds
        configuration(
            12,
            share("prod", "RESERVE", 4),
            share("eval", "LEND", 4),
            share("vision", "LEND_AND_BORROW", 4, borrow_limit=-1),
        ),
        events(Jobs("vision", 0, 1, repeat=16)),
        expected=200,
        set_by=("vision",),
        plain=1600 / 12,
    ),
    Case(
        "a LEND share never borrows: its jobs get its own limit only",
        configuration(8, share("eval", "LEND", 4), share("other", "LEND", 4)),
        events(Jobs("eval", 0, 4, repeat=2)),
        expected=200,
        set_by=("eval",),
        plain=100,
    ),
    Case(
        "a borrow limit caps a borrower at its own limit times 1 + borrowLimit / 100",
        # research: 4 x 1.5 = 6 units for 1,200 unit-seconds
        configuration(
            16, share("research", "LEND_AND_BORROW", 4, borrow_limit=50), share("other", "LEND", 12)
        ),
        events(Jobs("research", 0, 1, repeat=12)),
        expected=200,
        set_by=("research",),
        plain=100,
    ),
    Case(
        "a subset bound can exceed the whole-queue bound",
        # a and b may each use 4 (8 - prod's 4), and together also only 4: 800 unit-seconds take 200 s, while
        # each alone needs 100 s and all three together (8 units, 900 unit-seconds) 112.5 s
        configuration(
            8,
            share("prod", "RESERVE", 4),
            share("a", "LEND_AND_BORROW", 2),
            share("b", "LEND_AND_BORROW", 2),
        ),
        events(Jobs("a", 0, 4), Jobs("b", 0, 4), Jobs("prod", 0, 1)),
        expected=200,
        set_by=("a", "b"),
        plain=112.5,
    ),
    Case(
        "work counts from its submission on: a later burst can set the bound",
        # eval (4 units): from 0, 1,700 unit-seconds -> 425 s; from 100, 1,600 -> 100 + 400 = 500 s
        configuration(8, share("eval", "LEND", 4), share("other", "LEND", 4)),
        events(Jobs("eval", 0, 1), Jobs("eval", 100, 4, repeat=4)),
        expected=500,
        set_by=("eval",),
        plain=300,
    ),
    Case(
        "with capacity to spare the longest job sets the bound",
        configuration(8, share("eval", "LEND", 4), share("other", "LEND", 4)),
        events(Jobs("eval", 0, 1, duration=500), Jobs("other", 0, 2)),
        expected=500,
        set_by=(),
        plain=500,
    ),
    Case(
        "each capacity unit is bounded on its own",
        # 800 unit-seconds on the 4 units of one type: 200 s (the plain bound adds both types' 8 units up)
        configuration({UNIT: 4, OTHER_UNIT: 4}, share("team", "LEND_AND_BORROW", {UNIT: 2, OTHER_UNIT: 4})),
        events(Jobs("team", 0, 4, repeat=2)),
        expected=200,
        set_by=("team",),
        plain=100,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bound_under_caps(case: Case) -> None:
    capped = bench.bound_under_caps(case.jobs, case.config.queue)
    plain = bench.work_conserving_bound(case.jobs, sum(case.config.queue.capacity.values()))
    assert capped.span_start == 0
    assert capped.span_end == pytest.approx(case.expected)
    assert capped.shares == case.set_by
    assert plain.span_end == pytest.approx(case.plain)
    assert capped.span_end >= plain.span_end - 1e-9 or len(case.config.queue.capacity) > 1


def test_a_job_larger_than_its_share_can_ever_hold_has_no_bound() -> None:
    config = configuration(8, share("eval", "LEND", 4), share("other", "LEND", 4))
    with pytest.raises(ValueError, match="more than the 4 the share can ever hold"):
        bench.bound_under_caps(events(Jobs("eval", 0, 5)), config.queue)


EXAMPLE_FILE = ROOT / "examples" / "traces" / "quotas.yaml"


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        # maxUsable of each share alone: RESERVE and LEND their own 4, research 4 x 2, vision 16 - prod's 4
        (("prod",), 4),
        (("eval",), 4),
        (("research",), 8),
        (("vision",), 12),
        # together never more than what prod does not keep for itself
        (("research", "vision"), 12),
        (("eval", "research", "vision"), 12),
        (("eval", "research"), 12),
        (("prod", "eval"), 8),
        (("prod", "eval", "research", "vision"), 16),
    ],
)
def test_the_example_files_caps_come_from_its_configuration(shares: tuple[str, ...], expected: int) -> None:
    queue = load_queue_configuration(EXAMPLE_FILE).queue
    assert bench.subset_capacity(queue, shares, UNIT) == expected


@pytest.mark.parametrize("load", [1.0, 1.5])
def test_with_every_share_borrowing_without_limit_the_bound_is_the_plain_bound(load: float) -> None:
    configuration = load_queue_configuration(EXAMPLE_FILE)
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.csv"
        bench.write_scaled_trace(trace, load, bench.load_trace_generator().SEED)
        trace_events = load_trace(trace, configuration)
    plain = bench.work_conserving_bound(trace_events, 16)
    all_borrow = bench.bound_under_caps(trace_events, bench.every_share_borrowing(configuration).queue)
    as_written = bench.bound_under_caps(trace_events, configuration.queue)
    assert all_borrow.span_end == pytest.approx(plain.span_end, rel=1e-12)
    assert as_written.span_end >= plain.span_end


def test_a_run_that_ends_before_a_bound_is_reported() -> None:
    config = configuration(8, share("eval", "LEND", 4), share("other", "LEND", 4))
    jobs = events(Jobs("eval", 0, 4, repeat=2))
    plain = bench.work_conserving_bound(jobs, 8)
    capped = bench.bound_under_caps(jobs, config.queue)

    def result(makespan: float) -> Any:
        return bench.RunResult("quota", 0.0, makespan, 0.0, None, 0.0, {}, 0, 0.0, 0, 0.0)

    bench.check_bounds([result(200.0)], plain, [capped])
    with pytest.raises(RuntimeError, match="below the bound under its file's caps"):
        bench.check_bounds([result(150.0)], plain, [capped])
