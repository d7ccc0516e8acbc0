"""The ``--quick`` runs of the two real-Airflow benchmarks, ``airflow_overhead.py`` and
``preemption_latency.py``, one after the other on one Airflow: what ``tests/airflow/test_soak.py`` runs,
after the soak's short run on SQLite (``--soak-first``).

Each script alone starts its own Airflow and emulator (``airflow_overhead.bench``); here one bench holds both
scripts' DAG files and quota files (the latency benchmark's jobs on a job queue of their own,
``LATENCY_QUEUE``), so the suite pays one Airflow start (about 20 CPU-seconds) instead of two. The overhead
runs go first: the quick latency run does not wait for its borrower to finish. Each prints its tables as
its script does; the exit status is 1 when either run went wrong. The figures of a quick run mean little:
the benchmarks' figures come from their own full runs (benchmarks/README.md).

``--soak-first SUMMARY`` plays the soak's short run first, on the same Airflow (``benchmarks/soak.py
--backend sqlite --duration 0 --decks 1 --drain 180 --seed 18``: one deck of its actions, SIGKILLs of the
scheduler included, then the drain), with the soak's DAG file beside the benchmarks' and their emulator
and StatsD settings from the start; it prints the soak's figures and writes them to SUMMARY as
``soak.py --summary`` does. The quick runs follow on that Airflow, their job queues applied beside the
soak's: one Airflow start instead of the two the soak and the quick runs cost alone. The exit status is
also 1 when the soak saw a violation; the Airflow home is kept then (``logs kept in ...``).

Usage::

    .venv/bin/python benchmarks/airflow_quick_runs.py
    .venv/bin/python benchmarks/airflow_quick_runs.py --soak-first soak-summary.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Runnable as a plain script from a checkout: the package, the test harness and the benchmarks importable.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import airflow_overhead  # noqa: E402
import preemption_latency  # noqa: E402
import soak  # noqa: E402
from rich.console import Console  # noqa: E402

#: The latency benchmark's job queue here (its script alone uses ``gpu-training``, as the overhead's does).
LATENCY_QUEUE = "latency-training"
#: The soak's short run, as ``tests/airflow/test_soak.py`` has it play on PostgreSQL with ``soak.py``.
SOAK_DECKS, SOAK_DRAIN_S, SOAK_SEED = 1, 180, 18


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--soak-first",
        type=Path,
        metavar="SUMMARY",
        help="play the soak's short run on SQLite first, on the same Airflow, and write its figures here",
    )
    args = parser.parse_args(argv)
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
    pools = [(airflow_overhead.POOL, overhead.capacity)]
    # The overhead's (twice its pool's slots: 4 in a quick run), which the latency run's two tasks fit.
    parallelism = max(airflow_overhead.parallelism(overhead), 4)

    def quick_runs(bench: airflow_overhead.Bench) -> int:
        failed = airflow_overhead.run(bench, overhead, Console(width=170))
        failed |= preemption_latency.run(bench, latency, Console(width=160))
        return failed

    if args.soak_first is None:
        with airflow_overhead.bench(
            dags,
            json.dumps({"jobQueues": queues}),
            parallelism=parallelism,
            pools=pools,
            allocation_interval=overhead.allocation_interval,
        ) as bench:
            return quick_runs(bench)

    return soak_then_quick_runs(
        args.soak_first, dags, queues, pools, overhead.allocation_interval, quick_runs
    )


def soak_then_quick_runs(
    summary: Path,
    dags: dict[str, str],
    queues: list[dict[str, Any]],
    pools: list[tuple[str, int]],
    allocation_interval: float,
    quick_runs: Callable[[airflow_overhead.Bench], int],
) -> int:
    """The soak's short run on SQLite (its figures printed and written to ``summary``), then ``quick_runs``
    on the same Airflow, which has the runs' DAGs, emulator and StatsD settings from its start."""
    home = Path(tempfile.mkdtemp(prefix="quota-soak-sqlite-"))
    dag_folder = airflow_overhead.write_dag_files(home / "dags", dags)
    # A link, not a copy: the soak's DAG file finds its training script from where it lies.
    (dag_folder / "soak_dags.py").symlink_to(soak.DAGS / "soak_dags.py")
    with airflow_overhead.bench_services(allocation_interval) as services:
        settings = {**services.airflow_env(), "AIRFLOW__CORE__DAGS_FOLDER": str(dag_folder)}
        with soak.soak_airflow("sqlite", home, settings) as airflow:
            result = soak.play(airflow, "sqlite", 0, SOAK_SEED, SOAK_DRAIN_S, SOAK_DECKS)
            soak.print_result(result, Console(width=120))
            soak.write_summary(result, summary)
            # The soak's job queue stays (its last jobs may not be recorded as ended yet), the runs' beside.
            both = {"jobQueues": soak.quota_document("start")["jobQueues"] + queues}
            try:
                airflow_overhead.ready_for_runs(airflow, json.dumps(both), pools)
                failed = quick_runs(services.bench(airflow))
            except BaseException:
                print(airflow.log_tails(60), file=sys.stderr)
                raise
    if result.violation_count:
        print(f"logs kept in {home}")
        return 1
    shutil.rmtree(home, ignore_errors=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
