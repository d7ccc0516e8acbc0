"""moto's server with SageMaker training jobs that behave like the real service (this part is ours).

moto 5.2.5 creates every training job already ``Completed``, silently overwrites a job of the same name
and has no ``StopTrainingJob``. This script patches its SageMaker backend, in the process that hosts the
server, so that:

* a job is ``InProgress`` (secondary ``Starting`` for its first 50 ms, then ``Training``) for a set time,
  then ``Completed``, or ``Failed`` with a reason; the test chooses per job, through hyperparameters read
  only here:
  ``emulator.duration_s`` (default 1; ``"60,2"`` gives attempt ``-a1`` 60 s and every later attempt 2 s,
  the attempt read from the job name's ``-a<N>`` suffix), ``emulator.outcome`` (``Completed`` or ``Failed``),
  ``emulator.failure_reason``, ``emulator.stop_delay_s`` (how long ``Stopping`` lasts, default 0.5) and
  ``emulator.create_delay_s`` (the first try's first job exists at once, but ``CreateTrainingJob``
  answers only after this many seconds: a window to kill the task that launched it in);
* ``StoppingCondition.MaxRuntimeInSeconds`` shorter than the duration stops the job at that time with the
  secondary status ``MaxRuntimeExceeded``, as SageMaker does;
* ``StopTrainingJob`` moves an ``InProgress`` job to ``Stopping`` and then ``Stopped``; on a job in any
  other status it answers AWS's ``ValidationException``; an unknown job is ``ValidationException`` too;
* a second ``CreateTrainingJob`` with a name already used is refused with ``ResourceInUse``, and a name
  SageMaker would refuse (pattern, 63 characters) is a ``ValidationException``;
* a fault moto cannot produce, injected here: ``emulator.create_error`` (``<code>:<n>``, e.g.
  ``InsufficientCapacityError:2``) makes ``CreateTrainingJob`` answer that error code (HTTP 400, as
  SageMaker answers ``InsufficientCapacityError``, ``ResourceLimitExceeded`` or ``ThrottlingException``)
  for attempts ``-a1`` to ``-a<n>`` of a task, creating nothing; later attempts are created as usual;
* ``AddTags`` with the tag ``emulator:finish`` (``FINISH_TAG``) ends what the job is doing at that moment:
  its training, as its duration would have (``Completed`` or its ``emulator.outcome``), or its
  ``Stopping`` (``Stopped``); the tag itself is not kept. A test that has seen what it checks of a job
  ends it so, instead of waiting out a duration chosen long enough for a loaded machine.

Everything else is moto's. Run ``python -m tests.sagemaker.moto_sagemaker`` (``--port 0`` picks a free
port); it prints ``PORT <n>`` once it serves, and runs until it is terminated.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from typing import Any

from moto import backends
from moto.core.exceptions import JsonRESTError
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.sagemaker import models as sagemaker_models
from moto.sagemaker import responses as sagemaker_responses
from moto.sagemaker.exceptions import ResourceInUseException, ValidationError

from tests.sagemaker.moto_process import FINISH_TAG

_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_LOCK = threading.Lock()


class _Timeline:
    """When a job was created, how it ends, and when it was asked to stop (monotonic seconds)."""

    def __init__(
        self, name: str, hyper_parameters: dict[str, str], stopping_condition: dict[str, Any] | None
    ) -> None:
        self.created = time.monotonic()
        durations = [float(each) for each in hyper_parameters.get("emulator.duration_s", "1").split(",")]
        attempt = re.search(r"-a(\d+)$", name)
        index = int(attempt.group(1)) - 1 if attempt else 0
        self.duration = durations[min(max(index, 0), len(durations) - 1)]
        self.outcome = hyper_parameters.get("emulator.outcome", "Completed")
        self.failure_reason = hyper_parameters.get(
            "emulator.failure_reason", "AlgorithmError: emulated failure"
        )
        self.stop_delay = float(hyper_parameters.get("emulator.stop_delay_s", "0.5"))
        max_runtime = (stopping_condition or {}).get("MaxRuntimeInSeconds")
        self.max_runtime = float(max_runtime) if max_runtime is not None else None
        self.stop_requested: float | None = None
        self.stop_cause = "Stopped"

    def finish(self) -> None:
        """End the training, or the stopping, now."""
        status, now = self.status()[0], time.monotonic()
        if status == "InProgress":
            self.duration = min(self.duration, now - self.created)
        elif status == "Stopping" and self.stop_requested is not None:
            self.stop_delay = min(self.stop_delay, now - self.stop_requested)

    def status(self) -> tuple[str, str]:
        """(TrainingJobStatus, SecondaryStatus) now."""
        now = time.monotonic()
        elapsed = now - self.created
        limit = self.max_runtime
        if self.stop_requested is None and limit is not None and self.duration > limit <= elapsed:
            self.stop_requested = self.created + limit
            self.stop_cause = "MaxRuntimeExceeded"
        if self.stop_requested is not None:
            if now - self.stop_requested < self.stop_delay:
                return "Stopping", "Stopping"
            return "Stopped", self.stop_cause
        if elapsed < self.duration:
            return "InProgress", "Starting" if elapsed < min(0.05, self.duration / 5) else "Training"
        if self.outcome == "Failed":
            return "Failed", "Failed"
        return "Completed", "Completed"


#: Each emulated job's timeline, by ARN (kept out of the job object: moto answers with its attributes).
_TIMELINES: dict[str, _Timeline] = {}


def status_of(arn: str) -> tuple[str, str, str | None] | None:
    """(TrainingJobStatus, SecondaryStatus, FailureReason) of an emulated job now, as DescribeTrainingJob
    would answer them, without building the rest of its answer; None for a job not made here."""
    timeline = _TIMELINES.get(arn)
    if timeline is None:
        return None
    status, secondary = timeline.status()
    return status, secondary, timeline.failure_reason if status == "Failed" else None


_original_create = sagemaker_models.SageMakerModelBackend.create_training_job
_original_add_tags = sagemaker_models.SageMakerModelBackend.add_tags
_original_response_object = sagemaker_models.FakeTrainingJob.response_object


class _InjectedError(JsonRESTError):
    """An error answer of ours (not moto's): an AWS error code moto never answers with."""


def _injected_create_error(training_job_name: str, hyper_parameters: dict[str, str]) -> None:
    """Raise ``emulator.create_error``'s error for the attempts it names (``<code>:<n>``: -a1 to -a<n>)."""
    setting = hyper_parameters.get("emulator.create_error")
    if not setting:
        return
    code, _, attempts = setting.partition(":")
    attempt = re.search(r"-a(\d+)$", training_job_name)
    if attempt is not None and int(attempt.group(1)) <= int(attempts or "1"):
        raise _InjectedError(code, f"Emulated {code}: no ml capacity for {training_job_name} now")


def _create_training_job(self: Any, training_job_name: str, **kwargs: Any) -> Any:
    _injected_create_error(training_job_name, dict(kwargs.get("hyper_parameters") or {}))
    if not _NAME.match(training_job_name or ""):
        raise ValidationError(
            message=f"1 validation error detected: Value '{training_job_name}' at 'trainingJobName' failed "
            "to satisfy constraint: Member must satisfy regular expression pattern: "
            "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
        )
    with _LOCK:
        if training_job_name in self.training_jobs:
            arn = self.training_jobs[training_job_name].arn
            raise ResourceInUseException(
                message="Training job names must be unique within an AWS account and region, and a "
                f"training job with this name already exists ({arn})"
            )
        job = _original_create(self, training_job_name=training_job_name, **kwargs)
        hyper_parameters = dict(kwargs.get("hyper_parameters") or {})
        _TIMELINES[job.arn] = _Timeline(training_job_name, hyper_parameters, kwargs.get("stopping_condition"))
    if training_job_name.endswith("-t1-a1"):
        # The job exists, the caller still waits for the answer: a window to kill the caller in.
        time.sleep(float(hyper_parameters.get("emulator.create_delay_s", "0")))
    return job


def _add_tags(self: Any, arn: str, tags: list[dict[str, str]]) -> list[dict[str, str]]:
    if any(tag.get("Key") == FINISH_TAG for tag in tags):
        with _LOCK:
            timeline = _TIMELINES.get(arn)
            if timeline is None:
                raise ValidationError(message=f"{FINISH_TAG}: {arn} is not an emulated training job")
            timeline.finish()
        tags = [tag for tag in tags if tag.get("Key") != FINISH_TAG]
    result: list[dict[str, str]] = _original_add_tags(self, arn, tags)
    return result


def _response_object(self: Any) -> dict[str, Any]:
    timeline = _TIMELINES.get(self.arn)
    if timeline is not None:
        status, secondary = timeline.status()
        self.training_job_status = status
        self.secondary_status = secondary
        self.training_end_time = None if status in ("InProgress", "Stopping") else sagemaker_models.utcnow()
        self.failure_reason = timeline.failure_reason if status == "Failed" else None
    response: dict[str, Any] = _original_response_object.fget(self)  # type: ignore[attr-defined]
    return response


def _stop_training_job(self: Any, training_job_name: str) -> None:
    with _LOCK:
        job = self.training_jobs.get(training_job_name)
        if job is None:
            raise ValidationError(message="Requested resource not found.")
        timeline = _TIMELINES.get(job.arn)
        status = timeline.status()[0] if timeline is not None else job.training_job_status
        if timeline is None or status != "InProgress":
            raise ValidationError(
                message=f"The request was rejected because the training job is in status {status}."
            )
        timeline.stop_requested = time.monotonic()


def _stop_training_job_response(self: Any) -> Any:
    self.sagemaker_backend.stop_training_job(self._get_param("TrainingJobName"))
    return sagemaker_responses.EmptyResult()


def install() -> None:
    """Patch moto's SageMaker backend in this process (idempotent).

    And moto's server looks for the service a request names among its own modules by listing its package
    folder (a directory read and a stat per entry, at every request): the list is read once here, as the
    folder does not change while the server runs.
    """
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    backend = sagemaker_models.SageMakerModelBackend
    backend.create_training_job = _create_training_job  # type: ignore[method-assign]
    backend.stop_training_job = _stop_training_job  # type: ignore[attr-defined]
    backend.add_tags = _add_tags  # type: ignore[method-assign]
    sagemaker_models.FakeTrainingJob.response_object = property(_response_object)  # type: ignore[method-assign,assignment]
    sagemaker_responses.SageMakerResponse.stop_training_job = _stop_training_job_response  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    install()
    server = ThreadedMotoServer(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    print(f"PORT {server.get_host_and_port()[1]}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:  # pragma: no cover - terminated by the test session
        pass
    finally:
        server.stop()
        sys.exit(0)


if __name__ == "__main__":
    main()
