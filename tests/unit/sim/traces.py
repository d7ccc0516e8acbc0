"""The small trace the trace-mode tests replay, and its quota file: one job queue of 4 GPUs split between
shares x and y (2 each, both LEND_AND_BORROW); big (x) borrows y's 2 idle GPUs, small (y) reclaims them at
t=10, and big resumes once small is done."""

from __future__ import annotations

from pathlib import Path

EXAMPLE_TRACES = Path(__file__).resolve().parents[3] / "examples" / "traces"


def lending_queue(name: str) -> str:
    """The quota file's entry (an item of ``jobQueues``): a queue of 4 GPUs that x and y lend each other."""
    return f"""  - jobQueueName: {name}
    capacityLimits: [{{capacityUnit: gpu, maxCapacity: 4}}]
    quotaShares:
      - {{quotaShareName: x, capacityLimits: [{{capacityUnit: gpu, maxCapacity: 2}}],
         resourceSharingConfiguration: {{strategy: LEND_AND_BORROW}}}}
      - {{quotaShareName: y, capacityLimits: [{{capacityUnit: gpu, maxCapacity: 2}}],
         resourceSharingConfiguration: {{strategy: LEND_AND_BORROW}}}}
"""


RECLAIM_QUOTAS = "jobQueues:\n" + lending_queue("q")
RECLAIM_TRACE = """submitTime,jobName,quotaShareName,schedulingPriority,capacityUnit,instanceCount,duration
0,big,x,5,gpu,4,100
10,small,y,1,gpu,2,10
"""


def write_trace_files(
    folder: Path, quotas: str = RECLAIM_QUOTAS, trace: str = RECLAIM_TRACE
) -> tuple[Path, Path]:
    """Write ``trace`` to ``folder/jobs.csv`` and ``quotas`` to ``folder/quotas.yaml``; return both paths."""
    (folder / "quotas.yaml").write_text(quotas)
    (folder / "jobs.csv").write_text(trace)
    return folder / "jobs.csv", folder / "quotas.yaml"


def example_trace_window(folder: Path, first: int = 1300, jobs: int = 300) -> tuple[Path, Path]:
    """Write ``jobs`` of the example trace's 2,000 (``examples/traces/bursty_teams.csv``, from its job
    ``first`` on, as submitted) to ``folder/window.csv``; return it and the example's own quota file.

    The default window replays in a tenth of the whole trace's time and keeps what the tests look at: all
    four teams submit, jobs borrow and are preempted with work lost, and every number in its per-job table
    is as wide as the whole trace's (arrivals and ends of 7 digits, waits of 6).
    """
    header, *rows = (EXAMPLE_TRACES / "bursty_teams.csv").read_text().splitlines()
    (folder / "window.csv").write_text("\n".join([header, *rows[first : first + jobs]]) + "\n")
    return folder / "window.csv", EXAMPLE_TRACES / "quotas.yaml"
