"""The local training backend: run a training entry point as a process group on the GPUs a job was granted.

The entry point sees SageMaker's training-script contract (``SM_MODEL_DIR``, ``SM_HPS``,
``SM_CHANNEL_<NAME>``, ...) plus ``QUOTA_CHECKPOINT_DIR``, so one script trains on SageMaker and on a
worker's own GPUs. Stopping follows SageMaker too: SIGTERM to the whole process group, SIGKILL after the
grace period. A watchdog process (``local_watchdog``) stops the group if the task process that started
it dies, even by SIGKILL. Nothing here imports Airflow: it runs on a GPU machine that has only PyTorch.
docs/local-backend.md is the contract a training script can rely on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from airflow_quota.backends import local_watchdog
from airflow_quota.backends.local_watchdog import living_group_members, signal_group

#: The only host of a local job, named as SageMaker names the first instance of a training job.
CURRENT_HOST = "algo-1"
#: Where the entry point finds the checkpoint directory, the same for every attempt of a task.
CHECKPOINT_DIR_ENV = "QUOTA_CHECKPOINT_DIR"
#: Lines of output kept for the outcome and the failure message.
OUTPUT_TAIL_LINES = 50
#: SageMaker's time between SIGTERM and SIGKILL when a training job is stopped.
DEFAULT_GRACE_PERIOD = 120.0
#: How long SIGKILLed processes may take to disappear before a stop gives up.
KILL_WAIT_SECONDS = 60.0
#: How often a stop checks whether the group is gone: it is on the preemptor's critical path. After a
#: second, less often: a training that takes its grace period to checkpoint should not pay for the checks.
GONE_POLL_SECONDS = 0.01
SLOW_GONE_POLL_SECONDS = 0.1
#: How long to wait for the last output once the whole group is gone.
OUTPUT_DRAIN_SECONDS = 5.0

#: Files under the checkpoint directory that are not (yet) a checkpoint: a name starting with a dot or
#: ending in ``.tmp`` (a checkpoint being written, before its rename), the same rule as for the atomic save.
_NOT_A_CHECKPOINT = (".",)
_NOT_A_CHECKPOINT_SUFFIX = ".tmp"

#: Variables the backend sets; inherited values are dropped and ``extra_env`` may not set them.
_CONTRACT_VARIABLES = frozenset({"TRAINING_JOB_NAME", "CUDA_VISIBLE_DEVICES", CHECKPOINT_DIR_ENV})


def _is_contract_variable(name: str) -> bool:
    return name in _CONTRACT_VARIABLES or name.startswith("SM_")


@dataclass(frozen=True)
class LocalTrainingJob:
    """One attempt of a training job on this host: what to run, on which devices, with which inputs."""

    #: TRAINING_JOB_NAME, for example ``<base>-a2`` for the second attempt.
    name: str
    #: argv of the entry point, for example ``[sys.executable, "train.py"]``.
    command: list[str]
    #: Granted device indices, exported as CUDA_VISIBLE_DEVICES (empty: no GPU visible).
    devices: list[int]
    #: The same for every attempt of a task, so a resumed attempt finds its checkpoint.
    checkpoint_dir: Path
    model_dir: Path
    output_data_dir: Path
    hyperparameters: Mapping[str, str] = field(default_factory=dict)
    channels: Mapping[str, Path] = field(default_factory=dict)
    working_dir: Path | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: Seconds between SIGTERM and SIGKILL when the job is stopped.
    grace_period: float = DEFAULT_GRACE_PERIOD

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a local training job needs a name (TRAINING_JOB_NAME)")
        if not self.command:
            raise ValueError(f"training job {self.name!r}: command is empty; give the entry point's argv")
        if any(index < 0 for index in self.devices) or len(set(self.devices)) != len(self.devices):
            raise ValueError(
                f"training job {self.name!r}: devices {self.devices} must be distinct indices >= 0"
            )
        if self.grace_period < 0:
            raise ValueError(
                f"training job {self.name!r}: grace_period must be >= 0, got {self.grace_period}"
            )
        for kind, names in (("hyperparameter", self.hyperparameters), ("channel", self.channels)):
            if any(not name for name in names):
                raise ValueError(f"training job {self.name!r}: a {kind} name is empty")
        reserved = sorted(name for name in self.extra_env if _is_contract_variable(name))
        if reserved:
            raise ValueError(
                f"training job {self.name!r}: extra_env may not set {', '.join(reserved)}; the backend sets "
                "them from the job (name, devices, directories, hyperparameters, channels)"
            )


def newest_checkpoint(directory: Path) -> float | None:
    """When the training last saved a checkpoint: the newest modification time (seconds since the epoch) of
    a file anywhere under ``directory``, or None when it holds none (or does not exist). Files whose name
    starts with a dot or ends in ``.tmp`` are checkpoints being written and do not count
    (docs/local-backend.md, "Checkpoints and resuming")."""
    newest: float | None = None
    try:
        walk = list(os.walk(directory))
    except OSError:
        return None
    for folder, _, files in walk:
        for name in files:
            if name.startswith(_NOT_A_CHECKPOINT) or name.endswith(_NOT_A_CHECKPOINT_SUFFIX):
                continue
            try:
                modified = os.stat(os.path.join(folder, name)).st_mtime
            except OSError:  # replaced or removed meanwhile
                continue
            if newest is None or modified > newest:
                newest = modified
    return newest


def build_environment(job: LocalTrainingJob, base_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The entry point's environment: ``base_env`` (default: this process') plus the training contract.

    Inherited ``SM_*``, TRAINING_JOB_NAME, CUDA_VISIBLE_DEVICES and QUOTA_CHECKPOINT_DIR are dropped, so
    nothing from the worker's own environment passes for part of the job. Directories are absolute.
    """
    inherited = os.environ if base_env is None else base_env
    env = {name: value for name, value in inherited.items() if not _is_contract_variable(name)}
    hyperparameters = dict(job.hyperparameters)
    env.update(
        {
            "TRAINING_JOB_NAME": job.name,
            "CUDA_VISIBLE_DEVICES": ",".join(str(index) for index in job.devices),
            "SM_NUM_GPUS": str(len(job.devices)),
            "SM_NUM_CPUS": str(_usable_cpu_count()),
            "SM_CURRENT_HOST": CURRENT_HOST,
            "SM_HOSTS": json.dumps([CURRENT_HOST]),
            "SM_MODEL_DIR": str(Path(job.model_dir).absolute()),
            "SM_OUTPUT_DATA_DIR": str(Path(job.output_data_dir).absolute()),
            CHECKPOINT_DIR_ENV: str(Path(job.checkpoint_dir).absolute()),
            "SM_HPS": json.dumps({name: _decoded(value) for name, value in hyperparameters.items()}),
            "SM_USER_ARGS": json.dumps(
                [part for name, value in hyperparameters.items() for part in (f"--{name}", value)]
            ),
            "SM_CHANNELS": json.dumps(sorted(job.channels)),
            "PYTHONUNBUFFERED": "1",
            # CUDA numbers devices fastest first by default; indices are nvidia-smi's (PCI bus) order.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }
    )
    for name, value in hyperparameters.items():
        env[f"SM_HP_{name.upper()}"] = value
    for name, path in job.channels.items():
        env[f"SM_CHANNEL_{name.upper()}"] = str(Path(path).absolute())
    env.update(job.extra_env)
    return env


def _decoded(value: str) -> object:
    """A hyperparameter as SageMaker's training toolkit puts it in SM_HPS: JSON when it parses, else text."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def _usable_cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def detect_local_gpus() -> int | None:
    """How many GPUs this host has: NVML (when pynvml is importable), else ``nvidia-smi -L``.

    None when neither works (no NVIDIA driver, or no GPU tooling): the caller decides, for example by
    using the quota file's ``maxCapacity`` for the local unit. CUDA_VISIBLE_DEVICES is not applied: this is
    the host's count, the range device indices are assigned from.
    """
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                return int(pynvml.nvmlDeviceGetCount())
            finally:
                pynvml.nvmlShutdown()
        except Exception:  # any NVML error (no driver, no library): fall back to nvidia-smi
            pass
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return None
    try:
        listing = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if listing.returncode != 0:
        return None
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))


class ProcessGroupSurvivedKill(RuntimeError):
    """Processes of the training group were still alive long after SIGKILL (stuck in the kernel)."""


@dataclass(frozen=True)
class StopOutcome:
    """How a stop went."""

    #: The entry point's exit status as ``subprocess`` reports it: negative means killed by that signal.
    exit_code: int
    #: The grace period ran out and the group had to be SIGKILLed.
    killed: bool
    #: From the stop request until no process of the group was left.
    seconds: float


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended. Exit code 0 is success, anything else a failure, unless the run was preempted."""

    #: The entry point's exit status (negative: killed by that signal, as ``subprocess`` reports it).
    exit_code: int
    #: ``should_stop`` asked for the stop: the job goes back to wait, whatever the exit code.
    preempted: bool
    #: The stop needed SIGKILL: the entry point did not exit within the grace period.
    killed: bool
    #: The last lines of its output (stdout and stderr merged), at most OUTPUT_TAIL_LINES.
    output_tail: list[str]
    #: From start to the end of the run.
    seconds: float

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and not self.preempted


def failure_message(outcome: RunOutcome) -> str:
    """What to tell the user about a run that did not succeed, with the tail of its output."""
    if outcome.preempted:
        head = f"The training entry point was stopped for preemption after {outcome.seconds:.1f} s"
        head += (
            " (SIGKILLed after its grace period)." if outcome.killed else f" (exit code {outcome.exit_code})."
        )
    elif outcome.exit_code < 0:
        head = (
            f"The training entry point was killed by {_signal_name(-outcome.exit_code)} "
            f"after {outcome.seconds:.1f} s."
        )
    else:
        head = f"The training entry point exited with code {outcome.exit_code} after {outcome.seconds:.1f} s."
    if not outcome.output_tail:
        return f"{head} It wrote no output."
    lines = "\n".join(f"    {line}" for line in outcome.output_tail)
    return f"{head} Last {len(outcome.output_tail)} line(s) of its output:\n{lines}"


def _signal_name(signum: int) -> str:
    try:
        return f"{signal.Signals(signum).name} ({signum})"
    except ValueError:
        return f"signal {signum}"


class LocalTrainingRun:
    """A started training: its process group (the entry point leads it), its watchdog and its output.

    Create it with ``start``. ``run`` waits for the end and stops the group when asked; ``stop`` can also
    be called from elsewhere (an operator's ``on_kill``), any number of times.
    """

    def __init__(
        self,
        job: LocalTrainingJob,
        process: subprocess.Popen[bytes],
        watchdog: subprocess.Popen[bytes],
        on_output: Callable[[str], None],
    ) -> None:
        self.job = job
        #: The entry point's PID, which is also its process group's ID.
        self.pid = process.pid
        self._process = process
        self._watchdog = watchdog
        self._on_output = on_output
        self._started = time.monotonic()
        self._tail: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        self._tail_lock = threading.Lock()
        self._output_error_reported = False
        self._killed = False
        #: Set once no process of the group was left: the group can never come back, and its ID may
        #: then be reused by an unrelated process group, which must never be signalled.
        self._group_over = False
        assert process.stdout is not None
        self._reader = threading.Thread(
            target=self._read_output, args=(process.stdout,), name=f"output of {job.name}", daemon=True
        )
        self._reader.start()

    @classmethod
    def start(cls, job: LocalTrainingJob, on_output: Callable[[str], None]) -> LocalTrainingRun:
        """Start the entry point in a new session (its own process group) and its watchdog.

        Creates the checkpoint, model and output directories. stdout and stderr are merged and each line
        is passed to ``on_output`` (without its line ending) as it comes, from a reader thread.
        """
        for directory in (job.checkpoint_dir, job.model_dir, job.output_data_dir):
            Path(directory).mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen(
            job.command,
            cwd=job.working_dir,
            env=build_environment(job),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert process.stdout is not None
        output_fd = process.stdout.fileno()
        try:
            watchdog = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    local_watchdog.__file__,
                    str(os.getpid()),
                    str(process.pid),
                    repr(job.grace_period),
                    str(output_fd),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(output_fd,),
                start_new_session=True,
            )
        except BaseException:
            signal_group(process.pid, signal.SIGKILL)
            process.wait()
            raise
        return cls(job, process, watchdog, on_output)

    def poll(self) -> int | None:
        """The entry point's exit code, or None while it runs."""
        return self._process.poll()

    @property
    def output_tail(self) -> list[str]:
        """The last lines of output so far."""
        with self._tail_lock:
            return list(self._tail)

    def stop(self, grace_period: float | None = None) -> StopOutcome:
        """SIGTERM the whole group, SIGKILL it after the grace period, and wait until all of it is gone.

        Returns once no process of the group is left (child processes and grandchildren included), so
        the GPUs are free. ``grace_period`` defaults to the job's.
        """
        grace = self.job.grace_period if grace_period is None else grace_period
        began = time.monotonic()
        killed = False
        if self._group_alive():
            signal_group(self.pid, signal.SIGTERM)
            if not self._wait_until_gone(grace):
                signal_group(self.pid, signal.SIGKILL)
                killed = True
                self._killed = True
                if not self._wait_until_gone(KILL_WAIT_SECONDS):
                    raise ProcessGroupSurvivedKill(
                        f"training job {self.job.name!r}: processes {living_group_members(self.pid)} of "
                        f"group {self.pid} are still alive {KILL_WAIT_SECONDS:g} s after SIGKILL"
                    )
        exit_code = self._process.wait()
        self._end_watchdog()
        return StopOutcome(exit_code=exit_code, killed=killed, seconds=time.monotonic() - began)

    def run(self, should_stop: Callable[[], bool], poll_interval: float = 1.0) -> RunOutcome:
        """Wait for the entry point to exit, asking ``should_stop()`` every ``poll_interval`` seconds.

        When ``should_stop()`` returns True the group is stopped and the outcome says ``preempted``. When
        the entry point exits by itself, processes it left running in its group are SIGKILLed (a SageMaker
        container ends the same way). If waiting is interrupted (an exception, such as a task timeout
        raised in this thread), the group is stopped before the exception goes on.
        """
        preempted = False
        try:
            while self._process.poll() is None:
                if should_stop():
                    preempted = True
                    self.stop()
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=poll_interval)
            self._kill_leftovers()
        except BaseException:
            self.stop()
            raise
        self._reader.join(OUTPUT_DRAIN_SECONDS)
        self._end_watchdog()
        return RunOutcome(
            exit_code=self._process.wait(),
            preempted=preempted,
            killed=self._killed,
            output_tail=self.output_tail,
            seconds=time.monotonic() - self._started,
        )

    def _kill_leftovers(self) -> None:
        if not self._group_alive():
            return
        leftovers = living_group_members(self.pid)
        if not leftovers:
            return
        self._note(
            f"[local backend] the entry point exited; killing {len(leftovers)} process(es) it left running"
        )
        signal_group(self.pid, signal.SIGKILL)
        if not self._wait_until_gone(KILL_WAIT_SECONDS):
            raise ProcessGroupSurvivedKill(
                f"training job {self.job.name!r}: processes {living_group_members(self.pid)} of group "
                f"{self.pid} are still alive {KILL_WAIT_SECONDS:g} s after SIGKILL"
            )

    def _group_alive(self) -> bool:
        if self._group_over:
            return False
        if self._process.poll() is None:
            return True  # the leader runs (a cheap answer; the /proc scan is for what it leaves behind)
        self._group_over = not living_group_members(self.pid)
        return not self._group_over

    def _wait_until_gone(self, seconds: float) -> bool:
        began = time.monotonic()
        while self._group_alive():
            waited = time.monotonic() - began
            if waited >= seconds:
                return False
            time.sleep(GONE_POLL_SECONDS if waited < 1.0 else SLOW_GONE_POLL_SECONDS)
        return True

    def _end_watchdog(self) -> None:
        if self._watchdog.poll() is None:
            self._watchdog.terminate()
            try:
                self._watchdog.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait()

    def _read_output(self, stream: IO[bytes]) -> None:
        with stream:
            for raw in iter(stream.readline, b""):
                self._note(raw.decode("utf-8", errors="replace").rstrip("\r\n"))

    def _note(self, line: str) -> None:
        with self._tail_lock:
            self._tail.append(line)
        try:
            self._on_output(line)
        except Exception:
            # Keep reading: a stalled pipe would block the training. Say it once.
            if not self._output_error_reported:
                self._output_error_reported = True
                print(f"on_output failed for training job {self.job.name!r}:", file=sys.stderr)
                traceback.print_exc()
