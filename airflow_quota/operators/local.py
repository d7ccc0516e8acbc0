"""QuotaTrainingOperator's local backend: the training entry point runs in the worker, on the granted GPUs.

The request is a subset of SageMaker's CreateTrainingJob (``ResourceConfig`` with a ``local-`` capacity
unit, ``HyperParameters``, ``InputDataConfig`` channels on local directories, ``Environment``,
``StoppingCondition``), so hyperparameters and channels come from the same fields on both backends.
The process is ``airflow_quota.backends.local``'s; unlike SageMaker, the worker itself watches it, with
the allocator's preemption signal as its stop condition (docs/operator.md, "The local backend").
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from airflow.sdk.exceptions import AirflowException

from airflow_quota.backends.local import (
    CHECKPOINT_DIR_ENV,
    KILL_WAIT_SECONDS,
    LocalTrainingJob,
    LocalTrainingRun,
    RunOutcome,
    failure_message,
)
from airflow_quota.backends.sagemaker import (
    TaskIdentity,
    TrainingRequestError,
    capacity_problems,
    normalized_request,
    training_job_name,
)
from airflow_quota.operators.training import (
    JobState,
    PreparedRequest,
    RecordState,
    call_factory,
    training_job_record,
)
from airflow_quota.protocol import LOCAL_UNIT_PREFIX, Backend, TrainingJobRecord

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from airflow_quota.operators.training import QuotaTrainingOperator

#: The request fields the local backend reads; anything else is refused rather than ignored.
LOCAL_REQUEST_FIELDS = (
    "ResourceConfig",
    "HyperParameters",
    "InputDataConfig",
    "Environment",
    "StoppingCondition",
)
#: How often the worker looks for the allocator's preemption signal while the process runs.
SIGNAL_POLL_SECONDS = 1.0
#: How often a grant checks whether the processes of an earlier worker run's training are gone.
EARLIER_PROCESS_POLL_SECONDS = 0.2
#: Where the per-task directories go when ``local_root_dir`` is not given: under AIRFLOW_HOME.
DEFAULT_ROOT_SUBDIR = "quota-training"

_UNSAFE_PATH_CHARACTERS = re.compile(r"[/\\\x00]")
#: A file name's limit on Linux and macOS.
MAX_PATH_PART_BYTES = 255


def local_request_problems(request: Mapping[str, Any]) -> list[str]:
    """Everything wrong with a local request, each problem on its own, before the job waits."""
    problems = [
        f"{key}: not used by the local backend, which reads only {', '.join(LOCAL_REQUEST_FIELDS)} "
        "(the entry point is the operator's entry_point)"
        for key in request
        if key not in LOCAL_REQUEST_FIELDS
    ]
    problems += capacity_problems(request)
    resource = request.get("ResourceConfig")
    if isinstance(resource, Mapping):
        unit = resource.get("InstanceType")
        if isinstance(unit, str) and unit and not unit.startswith(LOCAL_UNIT_PREFIX):
            problems.append(
                f"ResourceConfig.InstanceType: {unit!r} is not a local capacity unit; the local backend "
                f"trains on the worker's GPUs, whose unit starts with {LOCAL_UNIT_PREFIX!r} (e.g. local-gpu)"
            )
        problems += [
            f"ResourceConfig.{key}: not used by the local backend (give InstanceType and InstanceCount)"
            for key in resource
            if key not in ("InstanceType", "InstanceCount")
        ]
    problems += _string_map_problems(request, "HyperParameters")
    problems += _string_map_problems(request, "Environment")
    problems += _channel_problems(request.get("InputDataConfig"))
    stopping = request.get("StoppingCondition")
    if stopping is not None:
        if not isinstance(stopping, Mapping):
            problems.append("StoppingCondition: must be a mapping such as {'MaxRuntimeInSeconds': 3600}")
        else:
            runtime = stopping.get("MaxRuntimeInSeconds")
            if not isinstance(runtime, int) or isinstance(runtime, bool) or runtime < 1:
                problems.append(
                    f"StoppingCondition.MaxRuntimeInSeconds: must be a whole number >= 1, got {runtime!r}"
                )
            problems += [
                f"StoppingCondition.{key}: not used by the local backend (give MaxRuntimeInSeconds)"
                for key in stopping
                if key != "MaxRuntimeInSeconds"
            ]
    return problems


def _string_map_problems(request: Mapping[str, Any], field: str) -> list[str]:
    value = request.get(field)
    if value is None:
        return []
    if not isinstance(value, Mapping):
        return [f"{field}: must be a mapping of names to strings, got {type(value).__name__}"]
    return [
        f"{field}.{name}: values must be strings (as on SageMaker), got {type(item).__name__}"
        for name, item in value.items()
        if not isinstance(item, str)
    ]


def _channel_problems(channels: Any) -> list[str]:
    if channels is None:
        return []
    if not isinstance(channels, list):
        return ["InputDataConfig: must be a list of channels"]
    problems: list[str] = []
    seen: set[str] = set()
    for index, channel in enumerate(channels):
        where = f"InputDataConfig[{index}]"
        if not isinstance(channel, Mapping):
            problems.append(f"{where}: must be a mapping with ChannelName and DataSource")
            continue
        name = channel.get("ChannelName")
        if not isinstance(name, str) or not name:
            problems.append(f"{where}.ChannelName: missing")
        elif name in seen:
            problems.append(f"{where}.ChannelName: {name!r} appears twice")
        else:
            seen.add(name)
        problems += [
            f"{where}.{key}: not used by the local backend (give ChannelName and DataSource)"
            for key in channel
            if key not in ("ChannelName", "DataSource")
        ]
        source = channel.get("DataSource")
        file_source = source.get("FileDataSource") if isinstance(source, Mapping) else None
        if not isinstance(file_source, Mapping):
            problems.append(
                f"{where}.DataSource: the local backend reads local directories; give "
                "{'FileDataSource': {'FileUri': 'file:///absolute/path'}} (S3 is not downloaded)"
            )
            continue
        uri = file_source.get("FileUri")
        path = _channel_path(uri) if isinstance(uri, str) else None
        if path is None:
            problems.append(
                f"{where}.DataSource.FileDataSource.FileUri: must be file:///absolute/path or an absolute "
                f"path, got {uri!r}"
            )
        elif not path.exists():
            problems.append(
                f"{where}.DataSource.FileDataSource.FileUri: {path} does not exist on this worker"
            )
    return problems


def _channel_path(uri: str) -> Path | None:
    """The local path of a ``FileUri`` (``file:///...`` or an absolute path); None when it is neither."""
    if uri.startswith("file://"):
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost"):
            return None
        uri = unquote(parsed.path)
    path = Path(uri)
    return path if path.is_absolute() else None


def channels_of(request: Mapping[str, Any]) -> dict[str, Path]:
    channels: dict[str, Path] = {}
    for channel in request.get("InputDataConfig") or []:
        path = _channel_path(str(channel["DataSource"]["FileDataSource"]["FileUri"]))
        assert path is not None  # validated
        channels[str(channel["ChannelName"])] = path
    return channels


def processes_of_job(name: str) -> list[int]:
    """PIDs of this host's living processes whose environment has ``TRAINING_JOB_NAME=name``.

    Every process of a local training inherits the variable, so this finds a training (children
    included) that an earlier worker run started. Processes of other users and systems without
    ``/proc`` are not seen.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    wanted = f"TRAINING_JOB_NAME={name}".encode()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_bytes()
        except OSError:  # gone meanwhile, or not ours
            continue
        if stat[stat.rfind(b")") + 2 :].split()[:1] not in ([b"Z"], [b"X"]):  # a zombie has exited
            found.append(int(entry.name))
    return sorted(found)


def _path_part(value: str) -> str:
    """One path component from an id: separators escaped, ``.`` and ``..`` never a parent or self, and
    within a file name's 255 bytes (a longer one keeps its beginning and ends with ``~`` and a digest)."""
    part = _UNSAFE_PATH_CHARACTERS.sub(lambda match: f"%{ord(match.group()):02X}", value)
    part = part.replace(".", "%2E") if part in (".", "..", "") else part
    if len(part.encode()) <= MAX_PATH_PART_BYTES:
        return part
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    kept = part.encode()[: MAX_PATH_PART_BYTES - len(digest) - 1].decode(errors="ignore")
    return f"{kept}~{digest}"


def task_directory(root: Path, identity: TaskIdentity) -> Path:
    """``<root>/<dag>/<run>/<task>/<map index>``: the same for every try and attempt of the task instance."""
    parts = (identity.dag_id, identity.run_id, identity.task_id, str(identity.map_index))
    return root.joinpath(*(_path_part(part) for part in parts))


def default_root_dir() -> Path:
    home = os.environ.get("AIRFLOW_HOME") or "~/airflow"
    return Path(home).expanduser() / DEFAULT_ROOT_SUBDIR


class LocalBackend:
    """Training processes on the worker's own GPUs (``airflow_quota.backends.local``).

    One per worker process: it holds the run this process started, which ``on_kill`` stops. A job of an
    earlier worker run is never re-attached to: its process group dies with that run's task (the
    backend's watchdog). Until it is gone its ``state`` is ``Stopping`` and ``stop_and_wait`` waits for
    it, so two trainings never share the devices or the checkpoint directory; then the grant launches a
    new attempt, which resumes from the checkpoint directory every attempt shares.
    """

    kind: Backend = "local"

    def __init__(self, operator: QuotaTrainingOperator) -> None:
        self.operator = operator
        self.run: LocalTrainingRun | None = None
        self.outcome: RunOutcome | None = None
        #: The run's StoppingCondition.MaxRuntimeInSeconds, and whether the run went past it.
        self._runtime_limit: float | None = None
        self._runtime_exceeded = False

    # --- TrainingBackend ------------------------------------------------------------------------------

    def prepare(self, context: Context) -> PreparedRequest:
        config = self.operator.training_job_config
        if config is None:
            config = self.operator.model_trainer
        if callable(config):
            config = call_factory(config, context)
        if not isinstance(config, Mapping):
            kind = type(config).__name__
            raise TrainingRequestError(
                [f"the local backend takes a request dict or a callable returning one, not {kind}"]
            )
        document = normalized_request(config)
        problems = local_request_problems(document) + self._operator_problems()
        if not problems:
            problems = self._job_problems(document)
        if problems:
            raise TrainingRequestError(problems)
        resource = document["ResourceConfig"]
        return PreparedRequest(str(resource["InstanceType"]), int(resource["InstanceCount"]), document)

    def job_name(self, identity: TaskIdentity, attempt: int) -> str:
        return training_job_name(identity, attempt)

    def record(self, name: str, attempt: int, lease_id: str, state: RecordState) -> TrainingJobRecord:
        record = training_job_record(self.kind, name, attempt, lease_id, state)
        record["grace_period"] = float(self.operator.stop_grace_period)
        return record

    def launch(
        self,
        prepared: PreparedRequest,
        name: str,
        identity: TaskIdentity,
        tags: Mapping[str, str],
        grant: Mapping[str, Any],
    ) -> JobState:
        devices = [int(index) for index in grant.get("devices") or []]
        if len(devices) != prepared.instance_count:
            raise AirflowException(
                f"Lease {grant.get('lease_id')} grants devices {devices} for {prepared.capacity_unit} x "
                f"{prepared.instance_count}: a local unit's grant names one device index per unit"
            )
        job = self._job(prepared.document, name, identity, devices)
        self.outcome = None
        self._runtime_exceeded = False
        self.run = LocalTrainingRun.start(job, on_output=self._log_output)
        self.operator.log.info(
            "Started local training job %s (pid %d) on devices %s (CUDA_VISIBLE_DEVICES=%s), checkpoints %s",
            name,
            self.run.pid,
            devices,
            ",".join(str(index) for index in devices),
            job.checkpoint_dir,
        )
        return JobState(name, "InProgress", model_artifacts=str(job.model_dir))

    def state(self, name: str) -> JobState:
        if self.run is None or self.run.job.name != name:
            # Started by an earlier worker run: its watchdog stops it when that run's task process dies,
            # but the training may still be saving its checkpoint (its grace period).
            leftovers = processes_of_job(name)
            if leftovers:
                return JobState(name, "Stopping", secondary_status=f"processes {leftovers} still running")
            return JobState(
                name, "Missing", failure_reason="its process ended with the worker run that started it"
            )
        exit_code = self.run.poll()
        if exit_code is None:
            return JobState(name, "InProgress", model_artifacts=str(self.run.job.model_dir))
        return self._ended_state(name, exit_code)

    def request_stop(self, name: str) -> None:
        """Stop the process group (SIGTERM, SIGKILL after the grace period); returns once it is gone."""
        if self.run is not None and self.run.job.name == name:
            self.run.stop()

    def stop_and_wait(self, name: str) -> JobState:
        if self.run is None or self.run.job.name != name:
            self._wait_for_earlier_processes(name)
            return self.state(name)
        stopped = self.run.stop()
        return self._ended_state(name, stopped.exit_code)

    def monitor(self, name: str) -> BaseTrigger:
        raise AirflowException(f"local training job {name} is watched by its worker, not by a trigger")

    def link(self, name: str) -> dict[str, Any]:
        return {}  # the SageMaker console link does not apply

    def outputs(self, job: JobState) -> dict[str, Any]:
        model_dir = job.model_artifacts
        output_dir = str(Path(model_dir).parent / "output") if model_dir else None
        return {"model_dir": model_dir, "output_data_dir": output_dir}

    # --- the worker watches the process ---------------------------------------------------------------

    def watch(self, name: str, preempt_requested: Callable[[], bool]) -> JobState:
        """Wait for the process to end, stopping it when ``preempt_requested()`` or past its runtime limit.

        Returns once the whole process group is gone: ``Completed`` (exit 0), ``Stopped`` (preempted, or
        ``MaxRuntimeExceeded``), or ``Failed`` with the exit code and the tail of the output.
        """
        run = self.run
        assert run is not None and run.job.name == name
        limit = self._runtime_limit
        started = time.monotonic()

        def should_stop() -> bool:
            if preempt_requested():
                return True
            if limit is not None and time.monotonic() - started >= limit:
                self._runtime_exceeded = True
                return True
            return False

        self.outcome = run.run(should_stop, poll_interval=SIGNAL_POLL_SECONDS)
        return self._ended_state(name, self.outcome.exit_code)

    # --- helpers --------------------------------------------------------------------------------------

    def _ended_state(self, name: str, exit_code: int) -> JobState:
        assert self.run is not None
        model_dir = str(self.run.job.model_dir)
        if exit_code == 0:
            return JobState(name, "Completed", model_artifacts=model_dir)
        if self._runtime_exceeded:
            return JobState(name, "Stopped", secondary_status="MaxRuntimeExceeded", model_artifacts=model_dir)
        outcome = self.outcome
        if outcome is not None and not outcome.preempted:
            return JobState(
                name, "Failed", failure_reason=failure_message(outcome), model_artifacts=model_dir
            )
        return JobState(name, "Stopped", secondary_status=f"exit code {exit_code}", model_artifacts=model_dir)

    def _job(
        self, document: Mapping[str, Any], name: str, identity: TaskIdentity, devices: list[int]
    ) -> LocalTrainingJob:
        operator = self.operator
        root = Path(operator.local_root_dir) if operator.local_root_dir else default_root_dir()
        task_dir = task_directory(root, identity)
        runtime = (document.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds")
        self._runtime_limit = float(runtime) if runtime else None
        return LocalTrainingJob(
            name=name,
            command=[str(part) for part in operator.entry_point or []],
            devices=devices,
            checkpoint_dir=task_dir / "checkpoints",
            model_dir=task_dir / name / "model",
            output_data_dir=task_dir / name / "output",
            hyperparameters=dict(document.get("HyperParameters") or {}),
            channels=channels_of(document),
            working_dir=Path(operator.working_dir) if operator.working_dir else None,
            extra_env=dict(document.get("Environment") or {}),
            grace_period=float(operator.stop_grace_period),
        )

    def _operator_problems(self) -> list[str]:
        operator = self.operator
        problems = []
        entry_point = operator.entry_point
        if (
            not isinstance(entry_point, Sequence)
            or isinstance(entry_point, str)
            or not entry_point
            or not all(isinstance(part, str) and part for part in entry_point)
        ):
            problems.append(
                f"entry_point: the local backend needs the entry point's argv as a list of strings, such as "
                f"[sys.executable, 'train.py'], got {entry_point!r}"
            )
        if operator.working_dir and not Path(operator.working_dir).is_dir():
            problems.append(f"working_dir: {operator.working_dir} is not a directory on this worker")
        grace = operator.stop_grace_period
        if not isinstance(grace, int | float) or isinstance(grace, bool) or grace < 0:
            problems.append(f"stop_grace_period: must be >= 0 seconds, got {grace!r}")
        return problems

    def _job_problems(self, document: Mapping[str, Any]) -> list[str]:
        """What ``LocalTrainingJob`` itself refuses (reserved environment variables, empty names).

        No devices are granted yet: none are named (nothing is built in proportion to InstanceCount, which
        ``_prepare`` bounds afterwards).
        """
        placeholder = TaskIdentity("dag", "run", "task", -1, 1)
        try:
            self._job(document, "validation", placeholder, devices=[])
        except ValueError as error:
            return [str(error).replace("training job 'validation': ", "")]
        return []

    def _wait_for_earlier_processes(self, name: str) -> None:
        """Wait until no process of ``name`` (left by an earlier worker run) is left: its GPUs are free then.

        Its watchdog SIGTERMs it and SIGKILLs it after the grace period; past that (and the time a kill
        takes), what is left is SIGKILLed here.
        """
        leftovers = processes_of_job(name)
        if not leftovers:
            return
        self.operator.log.info(
            "Training job %s of an earlier run still has processes %s (stopped by its watchdog): waiting",
            name,
            leftovers,
        )
        deadline = time.monotonic() + float(self.operator.stop_grace_period) + KILL_WAIT_SECONDS
        while leftovers and time.monotonic() < deadline:
            time.sleep(EARLIER_PROCESS_POLL_SECONDS)
            leftovers = processes_of_job(name)
        if leftovers:
            self.operator.log.warning("Killing processes %s of training job %s (SIGKILL)", leftovers, name)
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + KILL_WAIT_SECONDS
            while processes_of_job(name):
                if time.monotonic() >= deadline:
                    raise AirflowException(f"processes of training job {name} survived SIGKILL")
                time.sleep(EARLIER_PROCESS_POLL_SECONDS)

    def _log_output(self, line: str) -> None:
        self.operator.log.info("%s", line)


__all__ = [
    "CHECKPOINT_DIR_ENV",
    "LOCAL_REQUEST_FIELDS",
    "LOCAL_UNIT_PREFIX",
    "LocalBackend",
    "channels_of",
    "default_root_dir",
    "local_request_problems",
    "task_directory",
]
