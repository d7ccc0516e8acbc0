"""The ``--quick`` runs of the two real-Airflow benchmarks, ``airflow_overhead.py`` and
``preemption_latency.py``, one after the other on one Airflow: what
``tests/airflow/test_overhead_benchmarks_run.py`` runs.

Each script alone starts its own Airflow and emulator (``airflow_overhead.bench``); here one bench holds both
scripts' DAG files and quota files (the latency benchmark's jobs on a job queue of their own,
``LATENCY_QUEUE``), so the suite pays one Airflow start (about 40 CPU-seconds) instead of two. The overhead
runs go first: the quick latency run does not wait for its borrower to finish. Each prints its tables as
its script does; the exit status is 1 when either run went wrong. The figures of a quick run mean little:
the benchmarks' figures come from their own full runs (benchmarks/README.md).

Usage::

    .venv/bin/python benchmarks/airflow_quick_runs.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# Runnable as a plain script from a checkout: the package, the test harness and the two benchmarks importable.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import airflow_overhead  # noqa: E402
import preemption_latency  # noqa: E402
from rich.console import Console  # noqa: E402

#: The latency benchmark's job queue here (its script alone uses ``gpu-training``, as the overhead's does).
LATENCY_QUEUE = "latency-training"


def main() -> int:
    overhead = airflow_overhead.parse_args(["--quick"])
    latency = preemption_latency.parse_args(["--quick"])
    queues = [
        *json.loads(airflow_overhead.quota_file(overhead.capacity))["jobQueues"],
        *json.loads(preemption_latency.quota_file(LATENCY_QUEUE))["jobQueues"],
    ]
    dags = {
        "overhead_dags.py": airflow_overhead.dag_file(overhead),
        "latency_dags.py": preemption_latency.dag_file(latency, LATENCY_QUEUE),
    }
    with airflow_overhead.bench(
        dags,
        json.dumps({"jobQueues": queues}),
        # The overhead's (twice its pool's slots: 4 in a quick run), which the latency run's two tasks fit.
        parallelism=max(airflow_overhead.parallelism(overhead), 4),
        pools=[(airflow_overhead.POOL, overhead.capacity)],
        allocation_interval=overhead.allocation_interval,
    ) as bench:
        failed = airflow_overhead.run(bench, overhead, Console(width=170))
        failed |= preemption_latency.run(bench, latency, Console(width=160))
    return failed


if __name__ == "__main__":
    sys.exit(main())
