"""``write_trace`` (what ``airflow quota history`` writes) makes a CSV that ``load_trace`` reads back."""

from __future__ import annotations

from pathlib import Path

from airflow_quota.sim.scenario import SubmitJob
from airflow_quota.sim.trace import TRACE_COLUMNS, TraceJob, load_queue_configuration, load_trace, write_trace

ROOT = Path(__file__).resolve().parents[3]
QUOTAS = ROOT / "examples" / "traces" / "quotas.yaml"
UNIT = "ml.p4d.24xlarge"


def test_written_jobs_read_back_with_their_times_priorities_and_open_durations(tmp_path: Path) -> None:
    jobs = [
        TraceJob(0, "first", "research", 7, UNIT, 2, 3600.25),
        TraceJob(0.000001, "second", "vision", 0, UNIT, 1, None, 3),
        TraceJob(86400.5, "third", "prod", 9999, UNIT, 4, 0),
    ]
    path = tmp_path / "jobs.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        write_trace(jobs, handle)

    events = load_trace(path, load_queue_configuration(QUOTAS))

    assert path.read_text().splitlines()[0] == ",".join(TRACE_COLUMNS)
    read = []
    for event in events:
        assert isinstance(event.action, SubmitJob)
        request = event.action.request
        read.append(
            (
                event.at,
                request.job_name,
                request.quota_share_name,
                request.scheduling_priority,
                request.capacity_unit,
                request.instance_count,
                event.action.duration,
                request.preemption_retries_before_termination,
            )
        )
    assert read == [
        (0, "first", "research", 7, UNIT, 2, 3600.25, None),
        (0.000001, "second", "vision", 0, UNIT, 1, None, 3),
        (86400.5, "third", "prod", 9999, UNIT, 4, 0, None),
    ]
