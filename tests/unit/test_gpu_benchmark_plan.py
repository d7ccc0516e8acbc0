"""The GPU benchmark's parts that need no GPU and no PyTorch: its options, its quota timeline, its flow.

PyTorch is not in the test environment, so the full flow runs with a stdlib stand-in for
gpu_train_torch.py that prints the same lines; the engine, the device assignment and the local backend
in it are the real ones.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airflow_quota.engine.model import Grant, JobStatus, Preemption, PreemptionRule
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_local_backend.py"


bench = load_script("benchmarks/gpu_local_backend.py")


def test_the_borrower_gets_the_idle_gpu_gives_it_back_and_gets_it_again_after_the_lender() -> None:
    queue = bench.TwoShareQueue(devices=1)
    queue.submit(bench.BORROWER_JOB, bench.BORROWER_SHARE)
    assert queue.cycle() == [Grant(bench.BORROWER_JOB, bench.UNIT, 1, borrowed=1)]
    assert queue.held == {bench.BORROWER_JOB: [0]}

    queue.submit(bench.LENDER_JOB, bench.LENDER_SHARE)
    (preemption,) = queue.cycle()
    assert isinstance(preemption, Preemption)
    assert (preemption.preemptor_id, preemption.victim_ids) == (bench.LENDER_JOB, (bench.BORROWER_JOB,))
    assert preemption.rule is PreemptionRule.RECLAIM
    assert queue.cycle() == [], "the lender must wait until the borrower has really stopped"
    assert queue.held == {bench.BORROWER_JOB: [0]}, "a stopping job keeps its GPU"

    queue.stopped(bench.BORROWER_JOB)
    assert queue.status(bench.BORROWER_JOB) is JobStatus.RUNNABLE
    assert queue.cycle() == [Grant(bench.LENDER_JOB, bench.UNIT, 1, borrowed=0)]
    assert queue.held == {bench.LENDER_JOB: [0]}, "the preemptor gets the GPU the victim freed"

    queue.finished(bench.LENDER_JOB)
    assert queue.cycle() == [Grant(bench.BORROWER_JOB, bench.UNIT, 1, borrowed=1)]
    assert queue.held == {bench.BORROWER_JOB: [0]}


def test_a_host_without_gpus_runs_the_small_cpu_timeline() -> None:
    options = bench.parse_args([], host_gpus=None)
    assert not options.use_gpu
    assert options.sizes == bench.CPU_SIZES


def test_a_host_with_a_gpu_runs_the_gpu_timeline_unless_told_cpu() -> None:
    assert bench.parse_args([], host_gpus=1).sizes == bench.GPU_SIZES
    assert bench.parse_args([], host_gpus=1).use_gpu
    forced = bench.parse_args(["--cpu", "--borrower-steps", "90", "--grace", "3"], host_gpus=1)
    assert not forced.use_gpu
    assert forced.sizes.borrower_steps == 90 and forced.grace_period == 3.0


def test_a_preemption_point_past_the_training_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--borrower-steps", "50", "--preempt-after", "50"], host_gpus=None)
    assert "nothing is left to resume" in capsys.readouterr().err


def test_the_trainer_report_keeps_the_last_value_of_each_key() -> None:
    lines = ["device=cuda:0 (NVIDIA H200)", "step=25 loss=0.5", "step=50 loss=0.25", "done step=60"]
    assert bench.read_report(lines) == {"device": "cuda:0", "step": "60", "loss": "0.25"}


STAND_IN_TRAINER = """
    import json, os, signal, sys, time
    from pathlib import Path

    stop = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    steps = int(json.loads(os.environ["SM_HPS"])["steps"])
    checkpoint = Path(os.environ["QUOTA_CHECKPOINT_DIR"]) / "checkpoint.json"
    output = Path(os.environ["SM_OUTPUT_DATA_DIR"])
    print("device=cpu (stand-in trainer)")
    start = json.loads(checkpoint.read_text())["step"] if checkpoint.exists() else 0
    if start:
        print(f"resumed_from_step={start}")

    def save(step):
        checkpoint.write_text(json.dumps({"step": step}))
        metrics = {"device": "cpu", "peak_memory_bytes": 0, "resumed_from_step": start, "last_step": step}
        (output / "metrics.json").write_text(json.dumps(metrics))

    step = start
    for step in range(start + 1, steps + 1):
        time.sleep(0.005)
        if step == start + 1:
            print(f"first_work_at={time.time():.6f}")
        if stop:
            save(step)
            print(f"checkpoint_saved_step={step}")
            sys.exit(143)
        if step % 25 == 0:
            print(f"step={step} loss=0.0")
    save(step)
    print(f"done step={step}")
"""


def test_the_benchmark_flow_preempts_hands_over_and_resumes_at_the_checkpointed_step(tmp_path: Path) -> None:
    trainer = tmp_path / "stand_in_trainer.py"
    trainer.write_text(textwrap.dedent(STAND_IN_TRAINER))
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--cpu",
            "--trainer",
            str(trainer),
            "--borrower-steps",
            "150",
            "--preempt-after",
            "50",
            "--lender-steps",
            "30",
            "--grace",
            "5",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "DEGRADED RUN ON THE CPU" in out
    assert "production-train preempts research-finetune (RECLAIM)" in out
    assert "victim exit code / SIGKILL needed:      143 / no" in out
    saved = next(line for line in out.splitlines() if "checkpoint saved at step:" in line).split()[-1]
    resumed = next(line for line in out.splitlines() if "borrower resumed from step:" in line).split()[-1]
    assert int(saved) >= 50 and resumed == saved
    assert "[research a2] done step=150" in out
