"""Preemption on one real GPU: the quota engine and the local backend, with a PyTorch training on it.

Two quota shares divide the host's GPU 0 (the job queue has one ``local-gpu``):

* ``production`` (LEND, limit 1) owns the GPU and lends it while idle;
* ``research`` (LEND_AND_BORROW, limit 0, unlimited borrowing) only borrows.

The timeline, each decision made by the engine (``plan_cycle``) and each device index by
``assign_devices``:

1. research's job is granted the idle GPU (borrowed) and trains gpu_train_torch.py on it;
2. production's job arrives; the engine preempts the borrower (RECLAIM);
3. the borrower is SIGTERMed, saves its checkpoint and exits; the GPU is free again;
4. production's job is granted the GPU and trains to the end;
5. research's job is granted the GPU again and resumes from its checkpoint step.

Printed: time from the preemption decision to the victim's exit, the idle gap until the preemptor's
first CUDA work (allocation + process start + PyTorch and CUDA start-up), the step the borrower resumed
at, GPU memory as nvidia-smi sees it, and each run's peak GPU memory (PyTorch's allocator).

Runs with PyTorch alone (no Airflow). Without a GPU it runs the same timeline on the CPU, smaller, and
says so. Usage::

    python benchmarks/gpu_local_backend.py          # on the GPU when there is one, under 3 minutes
    python benchmarks/gpu_local_backend.py --cpu    # force the degraded CPU run
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Runnable as a plain script from a checkout: make the package importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_quota.backends.local import (
    LocalTrainingJob,
    LocalTrainingRun,
    RunOutcome,
    detect_local_gpus,
    failure_message,
)
from airflow_quota.engine.devices import assign_devices
from airflow_quota.engine.lifecycle import complete_stop, finish_job, set_status, submit_job
from airflow_quota.engine.model import (
    Decision,
    Grant,
    JobQueue,
    JobRequest,
    JobStatus,
    Preemption,
    QueueState,
    QuotaShare,
    SharingStrategy,
)
from airflow_quota.engine.planner import plan_cycle

UNIT = "local-gpu"
LENDER_SHARE = "production"
BORROWER_SHARE = "research"
BORROWER_JOB = "research-finetune"
LENDER_JOB = "production-train"
DEFAULT_TRAINER = Path(__file__).resolve().parent / "gpu_train_torch.py"
#: No run of the benchmark may take longer than this; the whole benchmark stays under 3 minutes.
RUN_LIMIT_SECONDS = 50.0


@dataclass(frozen=True)
class Sizes:
    """How much each training does: the borrower's total, when it is preempted, the lender's total."""

    borrower_steps: int
    preempt_after_step: int
    lender_steps: int
    width: int
    batch: int


#: On an H100/H200 a step of the GPU sizes takes a few milliseconds: each run lasts seconds.
GPU_SIZES = Sizes(borrower_steps=1500, preempt_after_step=300, lender_steps=600, width=2048, batch=4096)
CPU_SIZES = Sizes(borrower_steps=300, preempt_after_step=60, lender_steps=100, width=128, batch=256)


@dataclass(frozen=True)
class BenchmarkOptions:
    use_gpu: bool
    sizes: Sizes
    grace_period: float
    trainer: Path
    work_dir: Path | None


def parse_args(argv: Sequence[str], host_gpus: int | None) -> BenchmarkOptions:
    """Options from the command line; ``host_gpus`` (None: unknown) decides between GPU and CPU runs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even when there is a GPU")
    parser.add_argument("--borrower-steps", type=int, help="the borrower's full training, in steps")
    parser.add_argument("--preempt-after", type=int, help="preempt the borrower once it reports this step")
    parser.add_argument("--lender-steps", type=int, help="the lender's training, in steps")
    parser.add_argument("--width", type=int, help="the MLP's width")
    parser.add_argument("--batch", type=int, help="the batch size")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--trainer", type=Path, default=DEFAULT_TRAINER, help="the training entry point")
    parser.add_argument(
        "--work-dir", type=Path, help="where checkpoints and outputs go (default: a temp dir)"
    )
    args = parser.parse_args(list(argv))
    use_gpu = not args.cpu and bool(host_gpus)
    base = GPU_SIZES if use_gpu else CPU_SIZES
    sizes = Sizes(
        borrower_steps=args.borrower_steps or base.borrower_steps,
        preempt_after_step=args.preempt_after or base.preempt_after_step,
        lender_steps=args.lender_steps or base.lender_steps,
        width=args.width or base.width,
        batch=args.batch or base.batch,
    )
    if not 0 < sizes.preempt_after_step < sizes.borrower_steps:
        parser.error(
            f"--preempt-after ({sizes.preempt_after_step}) must be between 1 and the borrower's "
            f"steps ({sizes.borrower_steps}), or nothing is left to resume"
        )
    return BenchmarkOptions(use_gpu, sizes, args.grace, args.trainer, args.work_dir)


class TwoShareQueue:
    """The allocator's part, in memory: the engine's state and each job's device indices.

    The same calls the allocator makes: ``plan_cycle`` for decisions, ``assign_devices`` at each grant,
    and indices released only once a job has stopped or finished.
    """

    def __init__(self, devices: int = 1) -> None:
        queue = JobQueue(
            name="local-gpus",
            capacity={UNIT: devices},
            shares=(
                QuotaShare(LENDER_SHARE, {UNIT: devices}, SharingStrategy.LEND),
                QuotaShare(BORROWER_SHARE, {UNIT: 0}, SharingStrategy.LEND_AND_BORROW),
            ),
        )
        self.devices = devices
        self.state = QueueState(queue)
        self.held: dict[str, list[int]] = {}
        self._clock = 0.0

    def submit(self, job_id: str, share_name: str, count: int = 1) -> None:
        self._clock += 1.0
        request = JobRequest(job_id, share_name, UNIT, count)
        self.state = submit_job(self.state, job_id, request, at=self._clock)

    def cycle(self) -> list[Decision]:
        """One allocation cycle; granted jobs get their device indices and are RUNNING."""
        self._clock += 1.0
        plan = plan_cycle(self.state, now=self._clock)
        self.state = plan.state
        for decision in plan.decisions:
            if isinstance(decision, Grant):
                granted = assign_devices(self.devices, self.held.values(), decision.instance_count)
                if granted is None:
                    raise RuntimeError(f"the engine granted {decision} but the devices {self.held} are taken")
                self.held[decision.job_id] = granted
                self.state = set_status(self.state, decision.job_id, JobStatus.RUNNING)
        return list(plan.decisions)

    def stopped(self, job_id: str) -> None:
        """A preempted job has really stopped: requeued, and its devices free for its preemptor."""
        self.state = complete_stop(self.state, job_id)
        del self.held[job_id]

    def finished(self, job_id: str, succeeded: bool = True) -> None:
        self.state = finish_job(self.state, job_id, succeeded=succeeded)
        del self.held[job_id]

    def status(self, job_id: str) -> JobStatus:
        return self.state.jobs[job_id].status


def describe(decisions: Sequence[Decision]) -> str:
    parts = []
    for decision in decisions:
        if isinstance(decision, Grant):
            borrowed = f", {decision.borrowed} borrowed" if decision.borrowed else ""
            parts.append(
                f"grant {decision.job_id} ({decision.instance_count} {decision.capacity_unit}{borrowed})"
            )
        elif isinstance(decision, Preemption):
            parts.append(
                f"{decision.preemptor_id} preempts {', '.join(decision.victim_ids)} ({decision.rule})"
            )
    return "; ".join(parts) or "nothing"


def read_report(lines: Sequence[str]) -> dict[str, str]:
    """The trainer's ``key=value`` lines as one dict (the last value of a key wins)."""
    report: dict[str, str] = {}
    for line in lines:
        for token in line.split():
            key, equals, value = token.partition("=")
            if equals:
                report[key] = value
    return report


@dataclass
class TrainerOutput:
    """Collects a run's output, echoes it indented, and signals when a step has been reached."""

    label: str
    lines: list[str] = field(default_factory=list)
    reached: threading.Event = field(default_factory=threading.Event)
    wanted_step: int | None = None

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        print(f"    [{self.label}] {line}", flush=True)
        step = read_report([line]).get("step")
        if self.wanted_step is not None and step is not None and int(step) >= self.wanted_step:
            self.reached.set()


def gpu_memory_used_mib() -> int | None:
    """Memory in use on GPU 0, as nvidia-smi reports it (all processes); None without nvidia-smi."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return None
    result = subprocess.run(
        [nvidia_smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    try:
        return int(result.stdout.strip().splitlines()[0])
    except (ValueError, IndexError):
        return None


class Benchmark:
    def __init__(self, options: BenchmarkOptions, work_dir: Path) -> None:
        self.options = options
        self.work_dir = work_dir
        self.queue = TwoShareQueue(devices=1)

    def job(self, job_id: str, attempt: int, steps: int, devices: list[int]) -> LocalTrainingJob:
        sizes = self.options.sizes
        return LocalTrainingJob(
            name=f"{job_id}-a{attempt}",
            command=[sys.executable, str(self.options.trainer)],
            devices=devices if self.options.use_gpu else [],
            checkpoint_dir=self.work_dir / job_id / "checkpoints",
            model_dir=self.work_dir / job_id / f"a{attempt}" / "model",
            output_data_dir=self.work_dir / job_id / f"a{attempt}" / "output",
            hyperparameters={
                "steps": str(steps),
                "width": str(sizes.width),
                "batch": str(sizes.batch),
                "checkpoint_every": "50",
                "report_every": "25",
            },
            grace_period=self.options.grace_period,
        )

    def cycle(self, moment: str) -> list[Decision]:
        decisions = self.queue.cycle()
        print(f"  engine, {moment}: {describe(decisions)}", flush=True)
        return decisions

    def run_to_end(self, job: LocalTrainingJob, output: TrainerOutput) -> RunOutcome:
        deadline = time.monotonic() + RUN_LIMIT_SECONDS
        outcome = LocalTrainingRun.start(job, output).run(lambda: time.monotonic() > deadline, 0.1)
        if not outcome.succeeded:
            raise BenchmarkFailed(f"{job.name}: {failure_message(outcome)}")
        return outcome

    def run(self) -> dict[str, object]:
        sizes = self.options.sizes
        queue = self.queue
        memory_idle = gpu_memory_used_mib()

        queue.submit(BORROWER_JOB, BORROWER_SHARE)
        self.cycle("research's job arrives on an idle queue")
        borrower_devices = queue.held[BORROWER_JOB]
        borrower_output = TrainerOutput("research a1", wanted_step=sizes.preempt_after_step)
        borrower = LocalTrainingRun.start(
            self.job(BORROWER_JOB, 1, sizes.borrower_steps, borrower_devices), borrower_output
        )
        if not borrower_output.reached.wait(RUN_LIMIT_SECONDS):
            borrower.stop(grace_period=0)
            raise BenchmarkFailed(f"the borrower never reached step {sizes.preempt_after_step}")
        memory_borrower = gpu_memory_used_mib()

        queue.submit(LENDER_JOB, LENDER_SHARE)
        decided_at = time.time()
        decisions = self.cycle("production's job arrives")
        if not any(isinstance(d, Preemption) and BORROWER_JOB in d.victim_ids for d in decisions):
            borrower.stop(grace_period=0)
            raise BenchmarkFailed(f"the engine did not preempt the borrower: {describe(decisions)}")
        stop = borrower.stop()
        victim_gone_at = time.time()
        memory_after_stop = gpu_memory_used_mib()
        borrower.run(lambda: False)  # collects the last output lines
        stopped_report = read_report(borrower_output.lines)
        queue.stopped(BORROWER_JOB)

        decisions = self.cycle("the borrower has stopped")
        if LENDER_JOB not in queue.held:
            raise BenchmarkFailed(f"the lender was not granted the freed GPU: {describe(decisions)}")
        lender_devices = queue.held[LENDER_JOB]
        lender_output = TrainerOutput("production a1")
        launched_at = time.time()
        self.run_to_end(self.job(LENDER_JOB, 1, sizes.lender_steps, lender_devices), lender_output)
        lender_report = read_report(lender_output.lines)
        queue.finished(LENDER_JOB)

        self.cycle("production's job finished")
        if BORROWER_JOB not in queue.held:
            raise BenchmarkFailed("the borrower was not granted the GPU again")
        resumed_output = TrainerOutput("research a2")
        self.run_to_end(
            self.job(BORROWER_JOB, 2, sizes.borrower_steps, queue.held[BORROWER_JOB]), resumed_output
        )
        resumed_report = read_report(resumed_output.lines)
        queue.finished(BORROWER_JOB)

        first_work_at = float(lender_report["first_work_at"])
        return {
            "devices": {"research a1": borrower_devices, "production a1": lender_devices},
            "preemption_to_victim_exit_s": victim_gone_at - decided_at,
            "victim_exit_code": stop.exit_code,
            "victim_sigkilled": stop.killed,
            "checkpoint_saved_step": int(stopped_report.get("checkpoint_saved_step", "-1")),
            "idle_gap_to_first_cuda_work_s": first_work_at - victim_gone_at,
            "lender_grant_and_launch_s": launched_at - victim_gone_at,
            "lender_startup_s": first_work_at - launched_at,
            "resumed_from_step": int(resumed_report.get("resumed_from_step", "-1")),
            "borrower_final_step": int(resumed_report.get("step", "-1")),
            "devices_used": {
                "research a1": stopped_report.get("device", "?"),
                "production a1": lender_report.get("device", "?"),
            },
            "gpu_memory_used_mib": {
                "idle": memory_idle,
                "borrower running": memory_borrower,
                "after borrower exit": memory_after_stop,
            },
            "peak_memory_bytes": {
                label: self.peak_memory(job_id, attempt)
                for label, job_id, attempt in (
                    ("research a1", BORROWER_JOB, 1),
                    ("production a1", LENDER_JOB, 1),
                    ("research a2", BORROWER_JOB, 2),
                )
            },
        }

    def peak_memory(self, job_id: str, attempt: int) -> int | None:
        metrics = self.work_dir / job_id / f"a{attempt}" / "output" / "metrics.json"
        if not metrics.exists():
            return None
        return int(json.loads(metrics.read_text())["peak_memory_bytes"])


class BenchmarkFailed(RuntimeError):
    pass


def print_results(results: dict[str, object], use_gpu: bool) -> None:
    def mib(value: object) -> str:
        return "n/a" if value is None else f"{int(str(value)) / 2**20:.0f} MiB"

    print()
    print("Local backend preemption on " + ("GPU 0" if use_gpu else "the CPU (DEGRADED: no GPU)"))
    print(f"  preemption decision -> victim gone:     {results['preemption_to_victim_exit_s']:.2f} s")
    print(
        f"  victim exit code / SIGKILL needed:      {results['victim_exit_code']} / "
        f"{'yes' if results['victim_sigkilled'] else 'no'}"
    )
    print(f"  idle gap until preemptor's first work:  {results['idle_gap_to_first_cuda_work_s']:.2f} s")
    print(f"    of which grant and launch:            {results['lender_grant_and_launch_s']:.3f} s")
    print(f"    of which process + PyTorch start-up:  {results['lender_startup_s']:.2f} s")
    print(f"  checkpoint saved at step:               {results['checkpoint_saved_step']}")
    print(f"  borrower resumed from step:             {results['resumed_from_step']}")
    print(f"  device indices granted (engine):        {results['devices']}")
    print(f"  device each run trained on:             {results['devices_used']}")
    print(f"  GPU memory used (nvidia-smi, MiB):      {results['gpu_memory_used_mib']}")
    peaks = results["peak_memory_bytes"]
    assert isinstance(peaks, dict)
    if use_gpu:
        print(
            "  peak GPU memory (PyTorch allocator):    "
            + ", ".join(f"{k} {mib(v)}" for k, v in peaks.items())
        )
        used = results["devices_used"]
        assert isinstance(used, dict)
        if not all(str(device).startswith("cuda") for device in used.values()):
            print("  WARNING: a run trained on the CPU although a GPU was granted (a CPU build of PyTorch?)")
    else:
        print("  peak GPU memory:                        n/a (CPU run)")


def main(argv: Sequence[str]) -> int:
    host_gpus = detect_local_gpus()
    options = parse_args(argv, host_gpus)
    if options.trainer == DEFAULT_TRAINER and importlib.util.find_spec("torch") is None:
        print("PyTorch is not installed: this benchmark trains a PyTorch model (pip install torch)")
        return 2
    if options.use_gpu:
        print(f"Host GPUs: {host_gpus}; the benchmark uses GPU 0")
    else:
        reason = "--cpu given" if host_gpus else "no GPU found (no NVML, no working nvidia-smi)"
        print(f"DEGRADED RUN ON THE CPU: {reason}. Timings are not GPU timings.")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpu-local-backend-") as temporary:
        work_dir = options.work_dir or Path(temporary)
        try:
            results = Benchmark(options, work_dir).run()
        except BenchmarkFailed as failure:
            print(f"BENCHMARK FAILED: {failure}")
            return 1
    print_results(results, options.use_gpu)
    print(f"  total benchmark time:                   {time.monotonic() - started:.1f} s")
    if results["resumed_from_step"] != results["checkpoint_saved_step"]:
        print("FAILED: the borrower did not resume at the step it checkpointed when preempted")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
