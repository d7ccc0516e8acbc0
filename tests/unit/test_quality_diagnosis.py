"""allocation_quality.py --diagnose: the idle-capacity oracle on hand-built states, and the engine against it.

The queue is examples/traces/quotas.yaml: 16 GPUs; prod RESERVE 4, eval LEND 4, research LEND_AND_BORROW 4
with borrowLimit 100 (ceiling 8), vision LEND_AND_BORROW 4 without a limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from airflow_quota.engine.model import Job, JobRequest, JobStatus, StopCause
from airflow_quota.sim.trace import load_queue_configuration
from tests.unit.test_quality_bound import bench

UNIT = "ml.p4d.24xlarge"
QUEUE = load_queue_configuration(bench.QUOTA_FILE).queue


def job(
    name: str,
    share: str,
    count: int,
    status: JobStatus = JobStatus.RUNNING,
    *,
    stop_cause: StopCause | None = None,
    preempted_by: str | None = None,
    awaiting: Mapping[str, int] | None = None,
) -> Job:
    return Job(
        name,
        JobRequest(name, share, UNIT, count),
        (0.0, int(name.rsplit("-", 1)[1])),
        status,
        stop_cause=stop_cause,
        preempted_by=preempted_by,
        awaiting_victims=dict(awaiting or {}),
    )


def waiting(name: str, share: str, count: int) -> Job:
    return job(name, share, count, JobStatus.RUNNABLE)


@dataclass(frozen=True)
class Case:
    name: str
    jobs: list[Job]
    #: The categories expected non-zero (every other one must be 0); they add up to 16.
    expected: dict[str, int]
    shares: frozenset[str] | None = None
    capacity: int | None = None


CASES = [
    Case("empty queue: nothing waits", [], {bench.NO_WORK: 16}),
    Case(
        "prod's RESERVE GPUs stay idle while only vision waits",
        [
            job("eval-1", "eval", 4),
            job("research-2", "research", 4),
            job("vision-3", "vision", 4),
            waiting("vision-4", "vision", 2),
        ],
        {bench.HELD_RUNNING: 12, bench.BLOCKED_RESERVE: 2, bench.NO_WORK: 2},
    ),
    Case(
        "research at its ceiling of 8 cannot take eval's idle GPUs",
        [
            job("research-1", "research", 4),
            job("research-2", "research", 4),
            waiting("research-3", "research", 1),
        ],
        {bench.HELD_RUNNING: 8, bench.BLOCKED_CEILING: 1, bench.NO_WORK: 7},
    ),
    Case(
        "a job being terminated counts in its share until it stops: research at its ceiling of 8",
        [
            job("research-1", "research", 4),
            job("research-2", "research", 4, stop_cause=StopCause.TERMINATED),
            waiting("research-3", "research", 1),
        ],
        {bench.HELD_RUNNING: 4, bench.HELD_STOPPING: 4, bench.BLOCKED_CEILING: 1, bench.NO_WORK: 7},
    ),
    Case(
        "eval (LEND) never borrows: its 5th GPU is a ceiling",
        [job("eval-1", "eval", 4), waiting("eval-2", "eval", 2)],
        {bench.HELD_RUNNING: 4, bench.BLOCKED_CEILING: 2, bench.NO_WORK: 10},
    ),
    Case(
        "a 4-GPU job does not fit 3 idle GPUs",
        [
            job("prod-1", "prod", 4),
            job("eval-2", "eval", 4),
            job("research-3", "research", 4),
            job("vision-4", "vision", 1),
            waiting("vision-5", "vision", 4),
        ],
        {bench.HELD_RUNNING: 13, bench.BLOCKED_SIZE: 3},
    ),
    Case(
        "a waiting job that fits idle lendable GPUs is counted as startable",
        [
            job("research-1", "research", 4),
            waiting("vision-2", "vision", 2),
            waiting("vision-3", "vision", 4),
        ],
        {bench.HELD_RUNNING: 4, bench.STARTABLE: 6, bench.NO_WORK: 6},
    ),
    Case(
        "whole jobs only: 2 + 4 fit 7 idle lendable GPUs as 6, the 7th is a size loss",
        [
            job("prod-1", "prod", 4),
            job("eval-2", "eval", 4),
            job("research-3", "research", 1),
            waiting("vision-4", "vision", 2),
            waiting("vision-5", "vision", 4),
            waiting("vision-6", "vision", 4),
        ],
        {bench.HELD_RUNNING: 9, bench.STARTABLE: 6, bench.BLOCKED_SIZE: 1},
    ),
    Case(
        "a preemptor waiting for a 1-GPU victim holds 3 idle GPUs promised to it",
        [
            job("vision-1", "vision", 4),
            job("vision-2", "vision", 4),
            job("vision-3", "vision", 4),
            job("vision-4", "vision", 1, stop_cause=StopCause.PREEMPTED, preempted_by="eval-5"),
            job("eval-5", "eval", 4, JobStatus.RUNNABLE, awaiting={"vision-4": 1}),
        ],
        {bench.HELD_RUNNING: 12, bench.HELD_STOPPING: 1, bench.PROMISED: 3},
    ),
    Case(
        "a 2-GPU victim of a 1-GPU preemptor: the surplus GPU is held by the stop too",
        [
            job("research-1", "research", 4),
            job("research-2", "research", 2, stop_cause=StopCause.PREEMPTED, preempted_by="research-3"),
            Job(
                "research-3",
                JobRequest("research-3", "research", UNIT, 1, scheduling_priority=50),
                (0.0, 3),
                JobStatus.RUNNABLE,
                awaiting_victims={"research-2": 1},
            ),
        ],
        {bench.HELD_RUNNING: 4, bench.HELD_STOPPING: 2, bench.NO_WORK: 10},
    ),
    Case(
        "a set of shares: research alone (cap 8) while prod and a borrowing vision hold the rest",
        [
            job("prod-1", "prod", 4),
            job("research-2", "research", 4),
            job("vision-3", "vision", 8),
            waiting("research-4", "research", 4),
        ],
        {bench.HELD_RUNNING: 4, bench.HELD_OUTSIDE: 4},
        shares=frozenset({"research"}),
        capacity=8,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_idle_partition_splits_capacity_by_the_rule_that_keeps_it_idle(case: Case) -> None:
    counts = bench.idle_partition(QUEUE, case.jobs, case.shares, case.capacity)
    assert {category: units for category, units in counts.items() if units} == case.expected
    assert sum(counts.values()) == (case.capacity or 16)


def test_engine_leaves_no_idle_gpu_a_waiting_job_could_legally_take() -> None:
    """Work conservation within the file's rules: after every settled moment of a small trace replay,
    with 60 s stops and checkpoints, no waiting job could have started on idle, unpromised GPUs."""
    import tempfile
    from pathlib import Path

    from airflow_quota.sim.scenario import Settings
    from airflow_quota.sim.trace import load_trace

    configuration = load_queue_configuration(bench.QUOTA_FILE)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.csv"
        bench.write_scaled_trace(path, 0.1, bench.load_trace_generator().SEED)
        events = load_trace(path, configuration)
    spec = bench.RunSpec("quota", configuration, events, Settings(stop_seconds=60.0), 900.0)
    capped = bench.bound_under_caps(events, configuration.queue)
    diagnosis = bench.diagnose(spec, capped)
    for partition in diagnosis.partitions:
        assert partition.unit_seconds[bench.STARTABLE] == 0, partition.startable_moments[:1]
        offered = partition.capacity * (diagnosis.span_end - max(partition.since, diagnosis.span_start))
        assert sum(partition.unit_seconds.values()) == pytest.approx(offered)
