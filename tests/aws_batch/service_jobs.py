"""The emulator's AWS Batch service jobs, scheduled by OUR engine on the emulator's clock.

``ServiceJobs.tick(now)`` is one round of the emulated AWS Batch scheduler, run before every answer:

1. each job holding capacity looks at its attempt's SageMaker training job: ``InProgress`` makes it
   STARTING (secondary status ``Starting``) or RUNNING, or, past ``timeoutConfig.attemptDurationSeconds``,
   stops it and fails the job; ``Completed`` SUCCEEDED; ``Failed`` or a stop nobody asked for FAILED;
   a job being preempted whose training job has ``Stopped`` is requeued at its place
   (``engine.complete_stop``), its attempt listed in ``preemptionSummary``;
2. the engine's ``plan_cycle`` decides for each job queue: a grant creates the attempt's training job
   (``<TrainingJobName>-a<N>``, the payload otherwise unchanged, so its checkpoint configuration resumes
   the work), a preemption stops the victims' training jobs.

Everything happens when someone asks (no thread of its own): what a training job did between two calls
is seen at the next one, at that call's time. SageMaker is behind ``TrainingJobs`` (in the server,
moto's own SageMaker backend in the same process).

A repeated ``clientToken`` (``repeated_client_token``): AWS's documentation of SubmitServiceJob says that
of two requests with identical payloads and ``clientToken`` values "the second request is rejected", without
saying whether that is an error or the first job's answer. ``REPLAY`` (the default) answers the first
job; ``REJECT`` emulates the documented rejection: a ``ClientException`` that does not name the job, so a
caller has to find it (ListServiceJobs by ``JOB_NAME``). Either way the same token with another request
is a ``ClientException``. ``timeoutConfig.attemptDurationSeconds`` is honoured (step 1).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from airflow_quota.engine import lifecycle
from airflow_quota.engine.model import (
    Grant,
    JobRequest,
    JobStatus,
    Preemption,
    QueueState,
    StopCause,
)
from airflow_quota.engine.planner import plan_cycle
from tests.aws_batch.batch_resources import BatchClientError, BatchResources

#: How many of a job's latest preempted attempts ``preemptionSummary.recentPreemptedAttempts`` lists.
RECENT_PREEMPTIONS = 5
_TRAINING_JOB_NAME_LENGTH = 63
#: What the emulator does with a second identical SubmitServiceJob under one ``clientToken``.
RepeatedClientToken = Literal["REPLAY", "REJECT"]
REPEATED_CLIENT_TOKEN_MODES: Final = ("REPLAY", "REJECT")


class TrainingJobs(Protocol):
    """The emulated SageMaker, as the scheduler uses it."""

    def create(self, request: dict[str, Any]) -> str:
        """CreateTrainingJob; returns the TrainingJobArn (raises ``BatchClientError`` when refused)."""

    def status(self, name: str) -> tuple[str, str, str | None]:
        """(TrainingJobStatus, SecondaryStatus, FailureReason)."""

    def stop(self, name: str) -> None:
        """StopTrainingJob; a job that is not InProgress any more is left as it is."""


@dataclass
class Attempt:
    training_job_name: str
    training_job_arn: str
    started_at: int
    stopped_at: int | None = None
    status_reason: str | None = None

    def answer(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "serviceResourceId": {"name": "TrainingJobArn", "value": self.training_job_arn},
            "startedAt": self.started_at,
        }
        if self.stopped_at is not None:
            answer["stoppedAt"] = self.stopped_at
        if self.status_reason:
            answer["statusReason"] = self.status_reason
        return answer


@dataclass
class ServiceJob:
    """One SubmitServiceJob: what was asked, and what the scheduler has done with it so far."""

    job_id: str
    arn: str
    queue_name: str
    queue_arn: str
    body: dict[str, Any]
    payload: dict[str, Any]
    created_at: int
    status: JobStatus = JobStatus.RUNNABLE
    status_reason: str = ""
    is_terminated: bool = False
    scheduled_at: int | None = None
    stopped_at: int | None = None
    attempts: list[Attempt] = field(default_factory=list)
    preempted: list[Attempt] = field(default_factory=list)

    @property
    def request(self) -> JobRequest:
        unit, count = capacity_of(self.payload)
        return JobRequest(
            job_name=self.body["jobName"],
            quota_share_name=self.body["quotaShareName"],
            capacity_unit=unit,
            instance_count=count,
            scheduling_priority=self.body.get("schedulingPriority", 0),
            preemption_retries_before_termination=(self.body.get("preemptionConfiguration") or {}).get(
                "preemptionRetriesBeforeTermination"
            ),
        )

    def summary(self) -> dict[str, Any]:
        """ListServiceJobs' item."""
        unit, count = capacity_of(self.payload)
        answer: dict[str, Any] = {
            "jobArn": self.arn,
            "jobId": self.job_id,
            "jobName": self.body["jobName"],
            "serviceJobType": self.body["serviceJobType"],
            "quotaShareName": self.body["quotaShareName"],
            "status": self.status.value,
            "capacityUsage": [{"capacityUnit": unit, "quantity": float(count)}],
            "createdAt": self.created_at,
            "isTerminated": self.is_terminated,
        }
        if self.status_reason:
            answer["statusReason"] = self.status_reason
        if self.attempts:
            answer["latestAttempt"] = {"serviceResourceId": self.attempts[-1].answer()["serviceResourceId"]}
            answer["startedAt"] = self.attempts[-1].started_at
        for key, value in (("scheduledAt", self.scheduled_at), ("stoppedAt", self.stopped_at)):
            if value is not None:
                answer[key] = value
        return answer

    def detail(self) -> dict[str, Any]:
        """DescribeServiceJob's answer. ``startedAt``, required by the model, is 0 until a first start."""
        answer = self.summary()
        answer["jobQueue"] = self.queue_arn
        answer["startedAt"] = answer.get("startedAt", 0)
        answer["schedulingPriority"] = self.body.get("schedulingPriority", 0)
        answer["serviceRequestPayload"] = self.body["serviceRequestPayload"]
        answer["attempts"] = [attempt.answer() for attempt in self.attempts]
        for key in ("retryStrategy", "preemptionConfiguration", "timeoutConfig", "tags"):
            if key in self.body:
                answer[key] = self.body[key]
        if self.preempted:
            answer["preemptionSummary"] = {
                "preemptedAttemptCount": len(self.preempted),
                "recentPreemptedAttempts": [a.answer() for a in self.preempted[-RECENT_PREEMPTIONS:]],
            }
        return answer


def capacity_of(payload: dict[str, Any]) -> tuple[str, int]:
    """The (instance type, instance count) a CreateTrainingJob request asks for."""
    resources = payload.get("ResourceConfig") or {}
    groups = resources.get("InstanceGroups")
    if groups:
        types = {group["InstanceType"] for group in groups}
        if len(types) != 1:
            raise BatchClientError("serviceRequestPayload: this emulator takes one instance type per job")
        return types.pop(), sum(int(group["InstanceCount"]) for group in groups)
    if "InstanceType" not in resources:
        raise BatchClientError("serviceRequestPayload: ResourceConfig.InstanceType is missing")
    return resources["InstanceType"], int(resources.get("InstanceCount", 1))


class ServiceJobs:
    """The service jobs of one account and region, and their scheduler."""

    def __init__(
        self,
        resources: BatchResources,
        training_jobs: TrainingJobs,
        *,
        repeated_client_token: RepeatedClientToken = "REPLAY",
    ) -> None:
        if repeated_client_token not in REPEATED_CLIENT_TOKEN_MODES:
            raise ValueError(f"repeated_client_token: one of {REPEATED_CLIENT_TOKEN_MODES}")
        self.resources = resources
        self.training_jobs = training_jobs
        #: ``REPLAY``: a repeated request answers its first job; ``REJECT``: AWS's documented rejection.
        self.repeated_client_token = repeated_client_token
        self.jobs: dict[str, ServiceJob] = {}
        #: What each clientToken submitted: the request (to tell a retry from a reuse) and the job id.
        self.client_tokens: dict[str, tuple[dict[str, Any], str]] = {}
        #: The engine's view of each job queue: its jobs that are not final.
        self.states: dict[str, QueueState] = {}
        self._submissions = 0

    # -- the API -------------------------------------------------------------------------------------

    def submit(self, body: dict[str, Any], now: float) -> dict[str, Any]:
        token = body.get("clientToken")
        if token is not None and token in self.client_tokens:
            first_body, job_id = self.client_tokens[token]
            if first_body != body:
                raise BatchClientError(
                    f"clientToken {token} was already used by another request (job {job_id}): use a new "
                    "token for a different job"
                )
            if self.repeated_client_token == "REJECT":
                raise BatchClientError(
                    f"clientToken {token} was already used by an identical request: this repeat is "
                    "rejected (find the job it submitted with ListServiceJobs)"
                )
            return self._submitted_answer(self.jobs[job_id])
        queue = self.resources.queue(body["jobQueue"])
        if body.get("shareIdentifier") is not None:
            raise BatchClientError(
                f"Job queue {queue.name} has a quota-share policy: give quotaShareName, not shareIdentifier"
            )
        share_name = body.get("quotaShareName")
        if share_name not in queue.shares:
            raise BatchClientError(
                f"quotaShareName {share_name!r} is not a quota share of job queue {queue.name}: use one of "
                f"{', '.join(queue.shares) or '(none yet: CreateQuotaShare first)'}"
            )
        priority = body.get("schedulingPriority", 0)
        if not 0 <= priority <= 9999:
            raise BatchClientError(f"schedulingPriority {priority} is out of range: give 0 to 9999")
        try:
            payload = json.loads(body["serviceRequestPayload"])
        except json.JSONDecodeError as error:
            raise BatchClientError(f"serviceRequestPayload is not JSON: {error}") from None
        if not isinstance(payload, dict):
            raise BatchClientError(
                "serviceRequestPayload must be a CreateTrainingJob request (a JSON object)"
            )
        capacity_of(payload)
        job_id = str(uuid.uuid4())
        job = ServiceJob(
            job_id=job_id,
            arn=f"{self.resources.arn_prefix}:service-job/{job_id}",
            queue_name=queue.name,
            queue_arn=queue.arn,
            body=dict(body),
            payload=payload,
            created_at=_ms(now),
        )
        self.jobs[job_id] = job
        if token is not None:
            self.client_tokens[token] = (dict(body), job_id)
        self._submissions += 1
        state = self._state(queue.name)
        state = lifecycle.submit_job(state, job_id, job.request, now, self._submissions)
        self.states[queue.name] = state
        self._follow(job, state, now)
        return self._submitted_answer(job)

    def describe(self, job_id: str) -> dict[str, Any]:
        return self.job(job_id).detail()

    def list(self, body: dict[str, Any]) -> dict[str, Any]:
        queue = self.resources.queue(body["jobQueue"]) if body.get("jobQueue") else None
        chosen = [job for job in self.jobs.values() if queue is None or job.queue_name == queue.name]
        filters = body.get("filters") or []
        status = body.get("jobStatus")
        for each in filters:
            values = each.get("values") or []
            if each.get("name") == "JOB_NAME":
                chosen = [job for job in chosen if any(_name_matches(job.body["jobName"], v) for v in values)]
                status = None
            elif each.get("name") == "QUOTA_SHARE_NAME":
                chosen = [job for job in chosen if job.body["quotaShareName"] in values]
        if status is None and not filters:
            status = "RUNNING"  # AWS: "If you don't specify a status, only RUNNING jobs are returned."
        if status is not None:
            chosen = [job for job in chosen if job.status.value == status]
        chosen.reverse()  # jobs created in the same millisecond: the later submission first
        chosen.sort(key=lambda job: job.created_at, reverse=True)
        return {"jobSummaryList": [job.summary() for job in chosen]}

    def update(self, body: dict[str, Any], now: float) -> dict[str, Any]:
        job = self.job(body["jobId"])
        priority = body["schedulingPriority"]
        if not 0 <= priority <= 9999:
            raise BatchClientError(f"schedulingPriority {priority} is out of range: give 0 to 9999")
        job.body["schedulingPriority"] = priority
        if not job.status.is_final:
            self.states[job.queue_name] = lifecycle.update_priority(
                self._state(job.queue_name), job.job_id, priority
            )
        return {"jobArn": job.arn, "jobName": job.body["jobName"], "jobId": job.job_id}

    def terminate(self, job_id: str, reason: str, now: float) -> dict[str, Any]:
        job = self.job(job_id)
        if job.status.is_final:
            return {}
        job.is_terminated = True
        state = lifecycle.terminate_job(self._state(job.queue_name), job_id, reason)
        self.states[job.queue_name] = state
        if job.attempts and state.jobs[job_id].stop_cause is StopCause.TERMINATED:
            self.training_jobs.stop(job.attempts[-1].training_job_name)
        self._follow(job, state, now)
        return {}

    def snapshot(self, queue_reference: str, now: float) -> dict[str, Any]:
        """GetJobQueueSnapshot: the RUNNABLE jobs in the order the engine would consider them, the first
        of each quota share, and the capacity in use, per share."""
        queue = self.resources.queue(queue_reference)
        waiting = sorted(
            (
                job
                for job in self.jobs.values()
                if job.queue_name == queue.name and job.status is JobStatus.RUNNABLE
            ),
            key=lambda job: (-job.body.get("schedulingPriority", 0), job.created_at),
        )
        front_of_shares: dict[str, list[dict[str, Any]]] = {}
        for job in waiting:
            front_of_shares.setdefault(
                job.body["quotaShareName"], [{"jobArn": job.arn, "earliestTimeAtPosition": job.created_at}]
            )
        used: dict[str, dict[str, float]] = {}
        for job in self.jobs.values():
            if job.queue_name == queue.name and job.status.holds_capacity:
                unit, count = capacity_of(job.payload)
                per_share = used.setdefault(job.body["quotaShareName"], {})
                per_share[unit] = per_share.get(unit, 0.0) + count
        total: dict[str, float] = {}
        for per_share in used.values():
            for unit, quantity in per_share.items():
                total[unit] = total.get(unit, 0.0) + quantity
        stamp = _ms(now)
        return {
            "frontOfQueue": {
                "jobs": [{"jobArn": j.arn, "earliestTimeAtPosition": j.created_at} for j in waiting[:100]],
                "lastUpdatedAt": stamp,
            },
            "frontOfQuotaShares": {"quotaShares": front_of_shares, "lastUpdatedAt": stamp},
            "queueUtilization": {
                "totalCapacityUsage": [{"capacityUnit": u, "quantity": q} for u, q in sorted(total.items())],
                "quotaShareUtilization": {
                    "topCapacityUtilization": [
                        {
                            "quotaShareName": share,
                            "capacityUsage": [
                                {"capacityUnit": u, "quantity": q} for u, q in sorted(units.items())
                            ],
                        }
                        for share, units in sorted(used.items())
                    ]
                },
                "lastUpdatedAt": stamp,
            },
        }

    def job(self, job_id: str) -> ServiceJob:
        found = self.jobs.get(job_id)
        if found is None:
            raise BatchClientError(f"Service job {job_id} does not exist")
        return found

    # -- the scheduler -------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """One round: see what the training jobs did, then let the engine decide, for every job queue."""
        for queue_name in list(self.states):
            queue = self.resources.queues[queue_name]
            state = lifecycle.update_queue(self.states[queue_name], self.resources.engine_queue(queue))
            state = self._observe_training_jobs(state, now)
            plan = plan_cycle(state, now)
            state = plan.state
            for decision in plan.decisions:
                if isinstance(decision, Grant):
                    state = self._start_attempt(state, self.jobs[decision.job_id], now)
                elif isinstance(decision, Preemption):
                    for victim_id in decision.victim_ids:
                        self.training_jobs.stop(self.jobs[victim_id].attempts[-1].training_job_name)
            for job_id in list(state.jobs):
                self._follow(self.jobs[job_id], state, now)
            self.states[queue_name] = lifecycle.without_final_jobs(state)

    def _observe_training_jobs(self, state: QueueState, now: float) -> QueueState:
        for job_id, engine_job in list(state.jobs.items()):
            if not engine_job.status.holds_capacity:
                continue
            job = self.jobs[job_id]
            attempt = job.attempts[-1]
            status, secondary, failure = self.training_jobs.status(attempt.training_job_name)
            if status in ("InProgress", "Stopping"):
                if engine_job.is_stopping:
                    continue
                limit = (job.body.get("timeoutConfig") or {}).get("attemptDurationSeconds")
                if limit is not None and now - attempt.started_at / 1000 >= limit:
                    reason = f"Attempt ran longer than timeoutConfig.attemptDurationSeconds ({limit} s)"
                    state = lifecycle.terminate_job(state, job_id, reason)
                    self.training_jobs.stop(attempt.training_job_name)
                    continue
                wanted = JobStatus.STARTING if secondary == "Starting" else JobStatus.RUNNING
                if status == "InProgress" and wanted is not engine_job.status:
                    state = lifecycle.set_status(state, job_id, wanted)
                continue
            attempt.stopped_at = _ms(now)
            if status == "Completed":
                attempt.status_reason = "Training job Completed"
                state = lifecycle.finish_job(state, job_id, succeeded=True, reason="")
            elif status == "Stopped" and engine_job.stop_cause is StopCause.PREEMPTED:
                attempt.status_reason = engine_job.status_reason.removeprefix("Being stopped: ")
                attempt.status_reason = attempt.status_reason[:1].upper() + attempt.status_reason[1:]
                job.preempted.append(attempt)
                state = lifecycle.complete_stop(state, job_id)
            elif status == "Stopped" and engine_job.stop_cause is StopCause.TERMINATED:
                attempt.status_reason = "Training job Stopped: service job terminated"
                state = lifecycle.complete_stop(state, job_id)
            else:
                reason = f"Training job {status}: {failure or secondary}"
                attempt.status_reason = reason
                state = lifecycle.finish_job(state, job_id, succeeded=False, reason=reason)
        return state

    def _start_attempt(self, state: QueueState, job: ServiceJob, now: float) -> QueueState:
        number = len(job.attempts) + 1
        base = str(job.payload.get("TrainingJobName") or job.body["jobName"])
        suffix = f"-a{number}"
        name = base[: _TRAINING_JOB_NAME_LENGTH - len(suffix)] + suffix
        try:
            arn = self.training_jobs.create({**job.payload, "TrainingJobName": name})
        except BatchClientError as error:
            state = lifecycle.finish_job(
                state, job.job_id, succeeded=False, reason=f"CreateTrainingJob: {error}"
            )
            return state
        job.attempts.append(Attempt(name, arn, _ms(now)))
        job.scheduled_at = _ms(now)
        return lifecycle.set_status(state, job.job_id, JobStatus.STARTING)

    def _follow(self, job: ServiceJob, state: QueueState, now: float) -> None:
        """Copy the engine's status and statusReason onto the service job."""
        engine_job = state.jobs[job.job_id]
        job.status = engine_job.status
        job.status_reason = engine_job.status_reason
        if job.status.is_final and job.stopped_at is None:
            job.stopped_at = _ms(now)

    def _state(self, queue_name: str) -> QueueState:
        if queue_name not in self.states:
            queue = self.resources.queues[queue_name]
            self.states[queue_name] = QueueState(self.resources.engine_queue(queue))
        return self.states[queue_name]

    @staticmethod
    def _submitted_answer(job: ServiceJob) -> dict[str, Any]:
        return {"jobArn": job.arn, "jobName": job.body["jobName"], "jobId": job.job_id}


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _name_matches(name: str, pattern: str) -> bool:
    if pattern.endswith("*"):
        return name.lower().startswith(pattern[:-1].lower())
    return name.lower() == pattern.lower()
