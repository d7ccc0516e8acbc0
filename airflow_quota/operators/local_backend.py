"""QuotaTrainingOperator's local strategy: the training entry point runs in the worker, on the granted GPUs.

The process is ``airflow_quota.backends.local``'s, its request and directories ``operators/local_job``'s.
Unlike SageMaker, the worker itself watches it, with the allocator's preemption signal as its stop
condition (docs/operator.md, "The local backend").
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_quota.backends.local import (
    KILL_WAIT_SECONDS,
    LocalTrainingJob,
    LocalTrainingRun,
    RunOutcome,
    failure_message,
    newest_checkpoint,
)
from airflow_quota.backends.local_evidence import launch_evidence
from airflow_quota.backends.sagemaker import (
    TaskIdentity,
    TrainingRequestError,
    normalized_request,
    training_job_name,
)
from airflow_quota.operators.backend import (
    ConsoleLink,
    JobState,
    PreparedRequest,
    RecordState,
    TaskLog,
    TrainingJobConfig,
    call_factory,
    training_job_record,
)
from airflow_quota.operators.local_job import (
    channels_of,
    default_root_dir,
    local_request_problems,
    task_directory,
)
from airflow_quota.protocol import Backend, TrainingJobRecord

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

#: How often the worker looks for the allocator's preemption signal while the process runs.
SIGNAL_POLL_SECONDS = 1.0
#: How often the worker looks for a newer checkpoint of the running process (``newest_checkpoint``) and, when
#: it finds one, records it for the allocator (``TrainingJobRecord.last_checkpoint``).
CHECKPOINT_POLL_SECONDS = 15.0
#: How often a grant checks whether the processes of an earlier worker run's training are gone.
EARLIER_PROCESS_POLL_SECONDS = 0.2


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


class LocalBackend:
    """Training processes on the worker's own GPUs (``airflow_quota.backends.local``).

    One per worker process: it holds the run this process started, which ``on_kill`` stops. A job of an
    earlier worker run is never re-attached to: its process group dies with that run's task (the
    backend's watchdog). Until it is gone its ``state`` is ``Stopping`` and ``stop_and_wait`` waits for
    it, so two trainings never share the devices or the checkpoint directory; then the grant launches a
    new attempt, which resumes from the checkpoint directory every attempt shares.
    """

    kind: Backend = "local"

    def __init__(
        self,
        *,
        entry_point: Any,
        local_root_dir: str | None,
        working_dir: str | None,
        stop_grace_period: Any,
        log: TaskLog,
        checkpoint_per_try: bool = False,
    ) -> None:
        #: The operator's arguments as rendered (checked by ``prepare``, hence ``Any``).
        self.entry_point = entry_point
        self.local_root_dir = local_root_dir
        self.working_dir = working_dir
        self.stop_grace_period = stop_grace_period
        self.checkpoint_per_try = checkpoint_per_try
        self.log = log
        self.run: LocalTrainingRun | None = None
        self.outcome: RunOutcome | None = None
        #: The run's StoppingCondition.MaxRuntimeInSeconds, and whether the run went past it.
        self._runtime_limit: float | None = None
        self._runtime_exceeded = False

    # --- TrainingBackend ------------------------------------------------------------------------------

    def prepare(self, config: TrainingJobConfig, context: Context) -> PreparedRequest:
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
        # Without the task instance id's digest: a local job never meets another deployment's in an AWS
        # account, and its directories are its task instance's under ``local_root_dir``.
        return training_job_name(dataclasses.replace(identity, ti_id=""), attempt)

    def record(self, name: str, attempt: int, lease_id: str, state: RecordState) -> TrainingJobRecord:
        record = training_job_record(self.kind, name, attempt, lease_id, state)
        record["grace_period"] = float(self.stop_grace_period)
        if state == "launched" and self.run is not None and self.run.job.name == name:  # how to see it
            evidence = launch_evidence(self.run.pid)
            if evidence is not None:
                record["process"] = evidence
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
        self.log.info(
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

    def console_link(self, name: str) -> ConsoleLink | None:
        return None  # the SageMaker console link does not apply

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

    def newest_checkpoint(self) -> float | None:
        """When the running job last saved a checkpoint (``backends.local.newest_checkpoint`` of its
        checkpoint directory), seconds since the epoch; None before any."""
        return None if self.run is None else newest_checkpoint(self.run.job.checkpoint_dir)

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
        root = Path(self.local_root_dir) if self.local_root_dir else default_root_dir()
        task_dir = task_directory(root, identity)
        runtime = (document.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds")
        self._runtime_limit = float(runtime) if runtime else None
        return LocalTrainingJob(
            name=name,
            command=[str(part) for part in self.entry_point or []],
            devices=devices,
            checkpoint_dir=task_dir / "checkpoints" / f"try-{identity.try_number}"
            if self.checkpoint_per_try
            else task_dir / "checkpoints",
            model_dir=task_dir / name / "model",
            output_data_dir=task_dir / name / "output",
            hyperparameters=dict(document.get("HyperParameters") or {}),
            channels=channels_of(document),
            working_dir=Path(self.working_dir) if self.working_dir else None,
            extra_env=dict(document.get("Environment") or {}),
            grace_period=float(self.stop_grace_period),
        )

    def _operator_problems(self) -> list[str]:
        problems = []
        entry_point = self.entry_point
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
        if self.working_dir and not Path(self.working_dir).is_dir():
            problems.append(f"working_dir: {self.working_dir} is not a directory on this worker")
        grace = self.stop_grace_period
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
        self.log.info(
            "Training job %s of an earlier run still has processes %s (stopped by its watchdog): waiting",
            name,
            leftovers,
        )
        deadline = time.monotonic() + float(self.stop_grace_period) + KILL_WAIT_SECONDS
        while leftovers and time.monotonic() < deadline:
            time.sleep(EARLIER_PROCESS_POLL_SECONDS)
            leftovers = processes_of_job(name)
        if leftovers:
            self.log.warning("Killing processes %s of training job %s (SIGKILL)", leftovers, name)
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + KILL_WAIT_SECONDS
            while processes_of_job(name):
                if time.monotonic() >= deadline:
                    raise AirflowException(f"processes of training job {name} survived SIGKILL")
                time.sleep(EARLIER_PROCESS_POLL_SECONDS)

    def _log_output(self, line: str) -> None:
        self.log.info("%s", line)
