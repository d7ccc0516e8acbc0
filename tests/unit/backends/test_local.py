"""The local training backend with real processes: contract, streaming, preemption and resume, stopping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from airflow_quota.backends.local import (
    LocalTrainingJob,
    LocalTrainingRun,
    build_environment,
    failure_message,
)

ROOT = Path(__file__).resolve().parents[3]
TRAIN_COUNTER = ROOT / "examples" / "training" / "train_counter.py"


def make_job(tmp_path: Path, command: list[str], name: str = "job-a1", **options: Any) -> LocalTrainingJob:
    return LocalTrainingJob(
        name=name,
        command=command,
        devices=options.pop("devices", []),
        checkpoint_dir=tmp_path / "checkpoints",
        model_dir=tmp_path / name / "model",
        output_data_dir=tmp_path / name / "output",
        **options,
    )


def python_script(tmp_path: Path, source: str) -> list[str]:
    script = tmp_path / "entry_point.py"
    script.write_text(textwrap.dedent(source))
    return [sys.executable, str(script)]


def is_running(pid: int) -> bool:
    """The process exists and has not exited (a zombie waiting to be reaped has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Lines:
    """Collects output lines as they arrive and lets a test wait for one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._arrived = threading.Condition()

    def __call__(self, line: str) -> None:
        with self._arrived:
            self.lines.append(line)
            self._arrived.notify_all()

    def wait_for(self, prefix: str, seconds: float = 10.0) -> str:
        with self._arrived:
            found = self._arrived.wait_for(
                lambda: any(line.startswith(prefix) for line in self.lines), timeout=seconds
            )
            assert found, f"no line starting with {prefix!r} in {self.lines}"
            return next(line for line in self.lines if line.startswith(prefix))

    def seen(self, prefix: str) -> bool:
        with self._arrived:
            return any(line.startswith(prefix) for line in self.lines)


def pid_after(line: str) -> int:
    return int(line.split()[-1])


Start = Callable[[LocalTrainingJob, Callable[[str], None]], LocalTrainingRun]


@pytest.fixture
def start() -> Iterator[Start]:
    """``LocalTrainingRun.start``, with every group it started stopped at the end even if a test failed."""
    runs: list[LocalTrainingRun] = []

    def start_run(job: LocalTrainingJob, on_output: Callable[[str], None]) -> LocalTrainingRun:
        runs.append(LocalTrainingRun.start(job, on_output))
        return runs[-1]

    yield start_run
    for run in runs:
        run.stop(grace_period=0.0)


# --- the environment contract ---------------------------------------------------------------------


def test_the_entry_point_sees_the_sagemaker_contract_and_only_its_granted_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: Start
) -> None:
    train_data = tmp_path / "data" / "train"
    command = python_script(
        tmp_path,
        """
        import json, os
        print(json.dumps({k: v for k, v in os.environ.items()
                          if k.startswith(("SM_", "TRAINING_", "CUDA_", "QUOTA_", "FROM_"))}))
        print("cwd", os.getcwd())
        """,
    )
    job = make_job(
        tmp_path,
        command,
        name="resnet-a2",
        devices=[2, 5],
        hyperparameters={"epochs": "3", "lr": "0.01", "optimizer": "adam", "use_amp": "true"},
        channels={"train": train_data},
        extra_env={"FROM_EXTRA_ENV": "yes"},
        working_dir=tmp_path,
    )
    lines = Lines()
    monkeypatch.setenv("SM_HP_LEFT_OVER", "from the worker")
    outcome = start(job, lines).run(should_stop=lambda: False, poll_interval=0.05)

    assert outcome.exit_code == 0, failure_message(outcome)
    env = json.loads(lines.lines[0])
    assert env["TRAINING_JOB_NAME"] == "resnet-a2"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,5"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", "CUDA must number GPUs as nvidia-smi does"
    assert env["SM_NUM_GPUS"] == "2"
    assert int(env["SM_NUM_CPUS"]) >= 1
    assert env["SM_CURRENT_HOST"] == "algo-1"
    assert json.loads(env["SM_HOSTS"]) == ["algo-1"]
    assert env["SM_MODEL_DIR"] == str(tmp_path / "resnet-a2" / "model")
    assert env["SM_OUTPUT_DATA_DIR"] == str(tmp_path / "resnet-a2" / "output")
    assert env["QUOTA_CHECKPOINT_DIR"] == str(tmp_path / "checkpoints")
    assert json.loads(env["SM_HPS"]) == {"epochs": 3, "lr": 0.01, "optimizer": "adam", "use_amp": True}
    assert env["SM_HP_EPOCHS"] == "3" and env["SM_HP_OPTIMIZER"] == "adam"
    assert json.loads(env["SM_USER_ARGS"])[:2] == ["--epochs", "3"]
    assert json.loads(env["SM_CHANNELS"]) == ["train"]
    assert env["SM_CHANNEL_TRAIN"] == str(train_data)
    assert env["FROM_EXTRA_ENV"] == "yes"
    assert "SM_HP_LEFT_OVER" not in env, (
        "a variable of the worker's own environment passed as a hyperparameter"
    )
    assert lines.lines[1] == f"cwd {tmp_path}"
    for directory in (job.checkpoint_dir, job.model_dir, job.output_data_dir):
        assert directory.is_dir(), f"{directory} was not created before the start"


def test_a_job_without_devices_sees_no_gpu(tmp_path: Path) -> None:
    env = build_environment(make_job(tmp_path, ["true"]), base_env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["SM_NUM_GPUS"] == "0"


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        pytest.param(
            {"extra_env": {"CUDA_VISIBLE_DEVICES": "0"}},
            "extra_env may not set",
            id="extra_env cannot widen devices",
        ),
        pytest.param(
            {"extra_env": {"SM_HP_LR": "1"}},
            "extra_env may not set",
            id="extra_env cannot fake a hyperparameter",
        ),
        pytest.param({"devices": [1, 1]}, "distinct indices", id="a device is granted once"),
        pytest.param({"grace_period": -1.0}, "grace_period", id="grace period is not negative"),
    ],
)
def test_a_job_that_breaks_the_contract_is_refused(
    tmp_path: Path, options: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        make_job(tmp_path, ["true"], **options)


def test_the_backend_and_the_engine_import_nothing_from_airflow() -> None:
    check = (
        "import sys\n"
        "import airflow_quota, airflow_quota.engine, airflow_quota.engine.devices\n"
        "import airflow_quota.backends.local, airflow_quota.backends.local_watchdog\n"
        "loaded = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.'))\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


# --- output ---------------------------------------------------------------------------------------


def test_output_arrives_line_by_line_while_the_entry_point_still_runs(tmp_path: Path, start: Start) -> None:
    go = tmp_path / "go"
    command = python_script(
        tmp_path,
        f"""
        import os, sys, time
        print("ready")                      # no flush: the backend makes Python's output unbuffered
        print("to stderr", file=sys.stderr)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        print("done")
        """,
    )
    lines = Lines()
    run = start(make_job(tmp_path, command), lines)
    lines.wait_for("ready")
    lines.wait_for("to stderr")
    assert run.poll() is None, "the line came only once the process had exited"
    assert not lines.seen("done")
    go.touch()
    outcome = run.run(should_stop=lambda: False, poll_interval=0.05)
    assert outcome.exit_code == 0 and outcome.succeeded
    assert lines.lines == ["ready", "to stderr", "done"]
    assert outcome.output_tail == ["ready", "to stderr", "done"]


# --- preemption and resume ------------------------------------------------------------------------


def counter_job(
    tmp_path: Path, name: str, steps: int = 12, step_seconds: str = "0.05", **hyperparameters: str
) -> LocalTrainingJob:
    return make_job(
        tmp_path,
        [sys.executable, str(TRAIN_COUNTER)],
        name=name,
        hyperparameters={"steps": str(steps), "step_seconds": step_seconds, **hyperparameters},
        grace_period=5.0,
    )


def test_a_run_preempted_at_step_k_resumes_at_step_k_and_ends_like_an_uninterrupted_run(
    tmp_path: Path, start: Start
) -> None:
    # Only the preempted attempt's steps take time (to be stopped between two): a step's length changes no
    # value.
    uninterrupted = counter_job(tmp_path / "uninterrupted", "counter-a1", step_seconds="0")
    whole = start(uninterrupted, lambda line: None).run(lambda: False, poll_interval=0.05)
    assert whole.exit_code == 0, failure_message(whole)
    expected = json.loads((uninterrupted.model_dir / "result.json").read_text())

    first_attempt = counter_job(tmp_path / "preempted", "counter-a1")
    first_lines = Lines()
    run = start(first_attempt, first_lines)
    preempted = run.run(should_stop=lambda: first_lines.seen("step 4/"), poll_interval=0.02)
    assert preempted.preempted and not preempted.killed
    assert preempted.exit_code == 143, failure_message(preempted)
    assert not preempted.succeeded
    assert not (first_attempt.model_dir / "result.json").exists()
    checkpoint = json.loads((first_attempt.checkpoint_dir / "checkpoint.json").read_text())
    stopped_at = checkpoint["step"]
    assert 4 <= stopped_at < 12
    assert f"SIGTERM: checkpoint saved at step {stopped_at}; exiting with 143" in preempted.output_tail

    second_attempt = counter_job(tmp_path / "preempted", "counter-a2", step_seconds="0")
    assert second_attempt.checkpoint_dir == first_attempt.checkpoint_dir
    second_lines = Lines()
    resumed = start(second_attempt, second_lines).run(lambda: False, poll_interval=0.05)
    assert resumed.exit_code == 0, failure_message(resumed)
    assert second_lines.lines[0] == f"counter-a2: resuming from checkpoint at step {stopped_at}"
    assert second_lines.lines[1].startswith(f"step {stopped_at + 1}/12 ")
    assert json.loads((second_attempt.model_dir / "result.json").read_text()) == expected


def test_stop_reports_a_clean_exit_within_the_grace_period(tmp_path: Path, start: Start) -> None:
    lines = Lines()
    job = counter_job(tmp_path, "counter-a1", steps=1000)
    run = start(job, lines)
    lines.wait_for("step 1/")
    stopped = run.stop()
    assert not stopped.killed
    assert stopped.exit_code == 143
    assert stopped.seconds < job.grace_period  # it exited on SIGTERM: no wait for the grace period's end
    assert not is_running(run.pid)
    assert run.stop().exit_code == 143, "a second stop (on_kill after a preemption) is harmless"


# --- the grace period and the whole group ---------------------------------------------------------


def test_a_group_that_ignores_sigterm_is_sigkilled_after_the_grace_period_grandchild_included(
    tmp_path: Path, start: Start
) -> None:
    command = python_script(
        tmp_path,
        """
        import os, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # inherited by the grandchild too
        subprocess.Popen([sys.executable, "-c",
            "import os, time; print('grandchild', os.getpid(), flush=True); time.sleep(60)"])
        print("child", os.getpid())
        time.sleep(60)
        """,
    )
    lines = Lines()
    run = start(make_job(tmp_path, command, grace_period=0.5), lines)
    child = pid_after(lines.wait_for("child"))
    grandchild = pid_after(lines.wait_for("grandchild"))
    asked = time.monotonic()
    outcome = run.run(should_stop=lambda: True, poll_interval=0.05)
    took = time.monotonic() - asked

    assert outcome.preempted and outcome.killed
    assert outcome.exit_code == -signal.SIGKILL
    assert 0.5 <= took < 3.5, f"SIGKILL came {took:.2f} s after SIGTERM; the grace period is 0.5 s"
    assert not is_running(child)
    assert not is_running(grandchild), "the grandchild outlived the stop and may still hold a GPU"
    assert "SIGKILLed after its grace period" in failure_message(outcome)


def test_train_counter_with_ignore_sigterm_is_sigkilled_after_the_grace_period(
    tmp_path: Path, start: Start
) -> None:
    lines = Lines()
    job = counter_job(tmp_path, "stubborn-a1", steps=1000, ignore_sigterm="true")
    run = start(job, lines)
    lines.wait_for("step 1/")
    stopped = run.stop(grace_period=0.5)
    assert stopped.killed and stopped.exit_code == -signal.SIGKILL
    assert 0.5 <= stopped.seconds < 3.5
    assert lines.seen("SIGTERM received and ignored")


def test_processes_left_behind_by_an_entry_point_that_exited_are_killed(tmp_path: Path, start: Start) -> None:
    command = python_script(
        tmp_path,
        """
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c",
            "import os, time; print('leftover', os.getpid(), flush=True); time.sleep(60)"])
        """,
    )
    lines = Lines()
    run = start(make_job(tmp_path, command), lines)
    leftover = pid_after(lines.wait_for("leftover"))
    outcome = run.run(should_stop=lambda: False, poll_interval=0.05)
    assert outcome.exit_code == 0 and not outcome.preempted
    assert not is_running(leftover)
    assert any("killing 1 process(es) it left running" in line for line in outcome.output_tail)


def start_task_process(job: LocalTrainingJob) -> subprocess.Popen[str]:
    """A stand-in for the Airflow task: starts the training with the backend, echoes its output."""
    task_source = f"""
        import os
        from pathlib import Path
        from airflow_quota.backends.local import LocalTrainingJob, LocalTrainingRun
        def emit(line):  # one write per line: the reader thread and this thread both print
            os.write(1, (line + "\\n").encode())
        job = LocalTrainingJob(
            name={job.name!r}, command={job.command!r}, devices=[],
            checkpoint_dir=Path({str(job.checkpoint_dir)!r}), model_dir=Path({str(job.model_dir)!r}),
            output_data_dir=Path({str(job.output_data_dir)!r}),
            hyperparameters={dict(job.hyperparameters)!r}, grace_period={job.grace_period!r},
        )
        run = LocalTrainingRun.start(job, emit)
        emit(f"training pid {{run.pid}}")
        run.run(lambda: False)
        """
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(task_source)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def sigkill_task_once_training(task: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGKILL the task once its training reached step 2; the training's PID and what followed."""
    assert task.stdout is not None
    seen: list[str] = []
    training = None
    try:
        for line in task.stdout:
            seen.append(line.rstrip("\n"))
            if line.startswith("training pid"):
                training = pid_after(line)
            if line.startswith("step 2/"):
                break
        assert training is not None, seen
        task.kill()
        # The watchdog relays the training's last words to the task's stderr, then exits (EOF here).
        rest, _ = task.communicate(timeout=20)
        assert wait_for(lambda: not is_running(training), seconds=10.0), "the training outlived its task"
    finally:
        task.kill()
        task.wait()
        if training is not None and is_running(training):
            os.killpg(training, signal.SIGKILL)
    return training, rest


def test_sigkilling_the_task_process_stops_the_training_group_gracefully(tmp_path: Path) -> None:
    job = counter_job(tmp_path, "orphan-a1", steps=1000)
    training, rest = sigkill_task_once_training(start_task_process(job))

    assert f"is gone: stopping training process group {training} (SIGTERM)" in rest, rest
    assert "SIGTERM: checkpoint saved at step" in rest, "the training was not stopped gracefully:\n" + rest
    assert json.loads((job.checkpoint_dir / "checkpoint.json").read_text())["step"] >= 2
    assert not (job.model_dir / "result.json").exists()


def test_sigkilling_the_task_process_sigkills_a_training_that_ignores_sigterm(tmp_path: Path) -> None:
    job = replace(counter_job(tmp_path, "stubborn-a1", steps=1000, ignore_sigterm="true"), grace_period=0.5)
    began = time.monotonic()
    training, rest = sigkill_task_once_training(start_task_process(job))

    assert "SIGTERM received and ignored" in rest, rest
    assert f"training process group {training} outlived its 0.5 s grace period: SIGKILLed" in rest, rest
    assert time.monotonic() - began < 8.0


# --- failures -------------------------------------------------------------------------------------


def test_a_non_zero_exit_is_a_failure_whose_message_shows_the_last_lines(
    tmp_path: Path, start: Start
) -> None:
    command = python_script(
        tmp_path,
        """
        import sys
        for number in range(1, 61):
            print(f"line {number}")
        print("CUDA out of memory", file=sys.stderr)
        sys.exit(3)
        """,
    )
    outcome = start(make_job(tmp_path, command), lambda line: None).run(lambda: False, 0.05)
    assert outcome.exit_code == 3 and not outcome.succeeded and not outcome.preempted
    message = failure_message(outcome)
    assert message.startswith("The training entry point exited with code 3 after ")
    assert "Last 50 line(s) of its output:" in message
    shown = [line.strip() for line in message.splitlines()[1:]]
    assert shown[0] == "line 12" and shown[-1] == "CUDA out of memory"


def test_an_entry_point_killed_by_a_signal_says_which(tmp_path: Path, start: Start) -> None:
    command = python_script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    outcome = start(make_job(tmp_path, command), lambda line: None).run(lambda: False, 0.05)
    assert outcome.exit_code == -signal.SIGSEGV
    assert "killed by SIGSEGV (11)" in failure_message(outcome)
    assert "It wrote no output." in failure_message(outcome)


def test_a_failing_output_callback_does_not_stall_the_training(tmp_path: Path, start: Start) -> None:
    command = python_script(tmp_path, "for n in range(20000):\n    print('x' * 100)\n")

    def broken(line: str) -> None:
        raise RuntimeError("log sink down")

    outcome = start(make_job(tmp_path, command), broken).run(lambda: False, 0.05)
    assert outcome.exit_code == 0
    assert len(outcome.output_tail) == 50


# --- the host's GPUs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        pytest.param(
            "GPU 0: NVIDIA H100 (UUID: GPU-a)\n"
            "  MIG 3g.40gb Device 0: (UUID: MIG-b)\n"
            "GPU 1: NVIDIA H100 (UUID: GPU-c)\n",
            "2",
            id="nvidia-smi lists two GPUs (MIG lines are not GPUs)",
        ),
        pytest.param(None, "None", id="no NVML and no nvidia-smi: unknown"),
    ],
)
def test_detect_local_gpus_counts_the_hosts_gpus(tmp_path: Path, listing: str | None, expected: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if listing is not None:
        fake = bin_dir / "nvidia-smi"
        fake.write_text(f"#!/bin/sh\nexec /bin/cat <<'EOF'\n{listing}EOF\n")
        fake.chmod(0o755)
    probe = (
        "import sys; sys.modules['pynvml'] = None\n"  # as on a host without pynvml
        "from airflow_quota.backends.local import detect_local_gpus\n"
        "print(detect_local_gpus())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected
