"""The checkpoint-aware victims benchmark still runs: a small trace prints its side-by-side table and its
bounds, and its default order loses what allocation_quality.py's ``quota`` column loses (the simulator
reporting checkpoints to the engine changes nothing in the default order)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import allocation_quality as quality  # noqa: E402
import checkpoint_victims as victims  # noqa: E402

from airflow_quota.sim.scenario import Settings  # noqa: E402


def test_checkpoint_victims_benchmark_small_run_prints_its_table() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "checkpoint_victims.py"),
            "--load",
            "0.1",
            "--runs",
            "default order,checkpoint-aware",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for label in ("default order", "checkpoint-aware", "GPU-seconds lost", "with a choice in the deciding"):
        assert label in result.stdout, f"{label!r} missing:\n{result.stdout}"
    assert "checkpoint-aware against the default order: GPU-seconds lost" in result.stdout, result.stdout
    assert "bounds on the default order's own decisions" in result.stdout, result.stdout


def test_the_default_order_loses_what_the_quota_column_loses() -> None:
    seed = quality.load_trace_generator().SEED
    configuration, events = victims.trace(0.1, seed)
    args = argparse.Namespace(stop_seconds=60.0, checkpoint_interval=900.0)
    priced = victims.simulate(victims.DEFAULT, configuration, events, seed, args)
    team_of = {event.action.request.job_name: "team" for event in events}  # type: ignore[union-attr]
    spec = quality.RunSpec("quota", configuration, events, Settings(stop_seconds=60.0), 900.0)
    plain = quality.run(spec, team_of)

    assert priced.preemptions > 0
    assert (priced.lost, priced.preemptions) == (plain.gpu_seconds_lost, plain.preemptions)
    assert priced.makespan == plain.span_end - plain.span_start
