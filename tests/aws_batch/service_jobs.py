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
saying whether that is an error or the first job's answer. ``REJECT`` (the default) emulates the
documented rejection: a ``ClientException`` that does not name the job, so a caller has to find it
(ListServiceJobs by ``JOB_NAME``); ``REPLAY`` answers the first job. Either way the same token with another
request is a ``ClientException``. ``timeoutConfig.attemptDurationSeconds`` is honoured (step 1).

It fights back on request (``JobBehaviour``, per job queue name prefix; ``conftest.emulator_behaviour``
with ``serviceJobs``): List answers that leave a job out for a while after its submission, small pages
(``nextToken``), throttling and server errors for the next calls of an operation, the SUBMITTED and
PENDING states before RUNNABLE and SCHEDULED before STARTING, and insufficient capacity: an attempt's
training job fails with SageMaker's ``CapacityError`` and AWS Batch puts the job back in RUNNABLE with
``CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY`` (no retry attempt consumed; the latest capacity-failed attempt
is kept in ``attempts``). A job queue's ``jobStateTimeLimitActions`` are applied: a job RUNNABLE with an
action's ``reason`` (its statusReason's code, before `` - ``) for ``maxTimeSeconds`` is terminated,
``Terminated by JobStateTimeLimit action due to reason: <reason>``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
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
#: AWS Batch's statusReason of a job waiting after insufficient capacity (its user guide).
INSUFFICIENT_CAPACITY_REASON: Final = (
    "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Unable to provision requested compute resources"
)
#: SageMaker's FailureReason of a training job that got no capacity (AWS Batch reads its prefix).
CAPACITY_FAILURE: Final = "CapacityError: Unable to provision requested ML compute capacity. Please retry"
#: ListServiceJobs' page size when ``maxResults`` is not given (AWS: up to 100).
DEFAULT_PAGE_SIZE: Final = 100
#: What the emulator does with a second identical SubmitServiceJob under one ``clientToken``.
RepeatedClientToken = Literal["REPLAY", "REJECT"]
REPEATED_CLIENT_TOKEN_MODES: Final = ("REPLAY", "REJECT")


@dataclass
class JobBehaviour:
    """How the service jobs of the job queues of one name prefix behave (``ServiceJobs.behave``)."""

    #: ListServiceJobs leaves a job out for this long after its submission.
    list_lag_s: float = 0.0
    #: Most jobs per ListServiceJobs page (``maxResults`` lower still), then ``nextToken``.
    page_size: int = DEFAULT_PAGE_SIZE
    #: Operation -> how many of its next calls answer ``ThrottlingException`` (HTTP 400).
    throttle: dict[str, int] = field(default_factory=dict)
    #: Operation -> how many of its next calls answer a server error (HTTP 500).
    server_errors: dict[str, int] = field(default_factory=dict)
    #: A new job is SUBMITTED this long, then PENDING ``pending_s``, then RUNNABLE (the engine sees it).
    submitted_s: float = 0.0
    pending_s: float = 0.0
    #: A granted job is SCHEDULED this long (its training job Pending) before STARTING.
    scheduled_s: float = 0.0
    #: How many of the next attempts' training jobs fail with SageMaker's ``CapacityError``.
    insufficient_capacity: int = 0

    @classmethod
    def from_request(cls, body: dict[str, Any]) -> JobBehaviour:
        return cls(
            list_lag_s=float(body.get("listLagSeconds", 0)),
            page_size=int(body.get("pageSize", DEFAULT_PAGE_SIZE)),
            throttle={str(k): int(v) for k, v in (body.get("throttle") or {}).items()},
            server_errors={str(k): int(v) for k, v in (body.get("serverErrors") or {}).items()},
            submitted_s=float(body.get("submittedSeconds", 0)),
            pending_s=float(body.get("pendingSeconds", 0)),
            scheduled_s=float(body.get("scheduledSeconds", 0)),
            insufficient_capacity=int(body.get("insufficientCapacity", 0)),
        )


class TransientError(Exception):
    """An answer AWS may give any call: ``code`` with HTTP ``status`` (throttling 400, server error 500)."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


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
    #: (SUBMITTED until, PENDING until): before the second, the scheduler does not see the job.
    arriving_until: tuple[float, float] | None = None
    #: SUBMITTED or PENDING while arriving (the engine has no PENDING: the scheduler has not seen it).
    arriving_status: str | None = None
    submit_seq: int = 0
    #: Since when it has been RUNNABLE with its current statusReason (seconds), for time limit actions.
    reason_since: float = 0.0
    #: Capacity failures of its attempts (retried by AWS Batch without consuming an attempt).
    capacity_failures: int = 0
    #: Training jobs created for it so far (each attempt's name: ``-a<N>``, N counting them all).
    training_jobs_created: int = 0

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

    @property
    def shown_status(self) -> str:
        return self.arriving_status or self.status.value

    def summary(self) -> dict[str, Any]:
        """ListServiceJobs' item."""
        unit, count = capacity_of(self.payload)
        answer: dict[str, Any] = {
            "jobArn": self.arn,
            "jobId": self.job_id,
            "jobName": self.body["jobName"],
            "serviceJobType": self.body["serviceJobType"],
            "quotaShareName": self.body["quotaShareName"],
            "status": self.shown_status,
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
        repeated_client_token: RepeatedClientToken = "REJECT",
    ) -> None:
        if repeated_client_token not in REPEATED_CLIENT_TOKEN_MODES:
            raise ValueError(f"repeated_client_token: one of {REPEATED_CLIENT_TOKEN_MODES}")
        self.resources = resources
        self.training_jobs = training_jobs
        #: ``REJECT``: AWS's documented rejection; ``REPLAY``: a repeated request answers its first job.
        self.repeated_client_token = repeated_client_token
        #: Job queue name prefix -> how its service jobs behave (``behave``).
        self.behaviours: dict[str, JobBehaviour] = {}
        self.jobs: dict[str, ServiceJob] = {}
        #: What each clientToken submitted: the request (to tell a retry from a reuse) and the job id.
        self.client_tokens: dict[str, tuple[dict[str, Any], str]] = {}
        #: The engine's view of each job queue: its jobs that are not final.
        self.states: dict[str, QueueState] = {}
        self._submissions = 0

    # -- behaviour on request ------------------------------------------------------------------------

    def behave(self, prefix: str, behaviour: JobBehaviour) -> None:
        self.behaviours[prefix] = behaviour

    def behaviour(self, queue_name: str) -> JobBehaviour:
        """The behaviour of the longest prefix of ``queue_name`` asked for; else as at once."""
        matching = [prefix for prefix in self.behaviours if queue_name.startswith(prefix)]
        return self.behaviours[max(matching, key=len)] if matching else JobBehaviour()

    def check_transient(self, operation: str, body: dict[str, Any]) -> None:
        """Throttle or fail this call, when its job queue's behaviour still asks for it."""
        queue_name = self._queue_name_of(body)
        if queue_name is None:
            return
        behaviour = self.behaviour(queue_name)
        for counts, code, status, message in (
            (behaviour.throttle, "ThrottlingException", 400, "Rate exceeded"),
            (behaviour.server_errors, "ServerException", 500, "We encountered an internal error"),
        ):
            if counts.get(operation, 0) > 0:
                counts[operation] -= 1
                raise TransientError(code, message, status)

    def _queue_name_of(self, body: dict[str, Any]) -> str | None:
        if body.get("jobQueue"):
            return str(body["jobQueue"]).rsplit("/", 1)[-1]
        job = self.jobs.get(str(body.get("jobId", "")))
        return job.queue_name if job is not None else None

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
        job.submit_seq = self._submissions
        behaviour = self.behaviour(queue.name)
        if behaviour.submitted_s > 0 or behaviour.pending_s > 0:
            job.status, job.arriving_status = JobStatus.SUBMITTED, "SUBMITTED"
            pending_from = now + behaviour.submitted_s
            job.arriving_until = (pending_from, pending_from + behaviour.pending_s)
            return self._submitted_answer(job)
        self._enter(job, now)
        return self._submitted_answer(job)

    def _enter(self, job: ServiceJob, now: float) -> None:
        """The scheduler takes the job: RUNNABLE (at its submission's place), or FAILED saying why."""
        job.arriving_until, job.arriving_status = None, None
        state = self._state(job.queue_name)
        state = lifecycle.submit_job(state, job.job_id, job.request, job.created_at / 1000, job.submit_seq)
        self.states[job.queue_name] = state
        job.reason_since = now
        self._follow(job, state, now)

    def describe(self, job_id: str) -> dict[str, Any]:
        return self.job(job_id).detail()

    def list(self, body: dict[str, Any], now: float) -> dict[str, Any]:
        queue = self.resources.queue(body["jobQueue"]) if body.get("jobQueue") else None
        behaviour = self.behaviour(queue.name) if queue is not None else JobBehaviour()
        chosen = [
            job
            for job in self.jobs.values()
            if (queue is None or job.queue_name == queue.name)
            and now >= job.created_at / 1000 + behaviour.list_lag_s
        ]
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
            chosen = [job for job in chosen if job.shown_status == status]
        chosen.reverse()  # jobs created in the same millisecond: the later submission first
        chosen.sort(key=lambda job: job.created_at, reverse=True)
        size = min(behaviour.page_size, int(body.get("maxResults") or DEFAULT_PAGE_SIZE))
        start = int(body.get("nextToken") or 0)
        answer: dict[str, Any] = {"jobSummaryList": [job.summary() for job in chosen[start : start + size]]}
        if start + size < len(chosen):
            answer["nextToken"] = str(start + size)
        return answer

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
        if job.arriving_until is not None:  # not seen by the scheduler yet
            job.arriving_until, job.arriving_status = None, None
            job.status, job.status_reason = JobStatus.FAILED, reason
            job.stopped_at = _ms(now)
            return {}
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
        for job in self.jobs.values():
            if job.arriving_until is not None:
                submitted_until, pending_until = job.arriving_until
                if now >= pending_until:
                    self._enter(job, now)
                elif now >= submitted_until:
                    job.arriving_status = "PENDING"
        for queue_name in list(self.states):
            queue = self.resources.queues[queue_name]
            state = lifecycle.update_queue(self.states[queue_name], self.resources.engine_queue(queue))
            state = self._observe_training_jobs(state, now)
            state = self._time_limit_actions(state, queue.body.get("jobStateTimeLimitActions") or [], now)
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

    def _time_limit_actions(self, state: QueueState, actions: Any, now: float) -> QueueState:
        """The job queue's ``jobStateTimeLimitActions``: a job RUNNABLE with an action's reason (the code
        its statusReason starts with) for ``maxTimeSeconds`` is terminated (CANCEL and TERMINATE alike:
        it never started)."""
        for job_id, engine_job in list(state.jobs.items()):
            if engine_job.status is not JobStatus.RUNNABLE:
                continue
            job = self.jobs[job_id]
            code = job.status_reason.split(" - ", 1)[0]
            for action in actions:
                if (
                    action.get("state") == "RUNNABLE"
                    and action.get("reason") == code
                    and now - job.reason_since >= float(action["maxTimeSeconds"])
                ):
                    job.is_terminated = True
                    state = lifecycle.terminate_job(
                        state,
                        job_id,
                        f"Terminated by JobStateTimeLimit action due to reason: {action['reason']}",
                    )
                    break
        return state

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
                scheduled_until = attempt.started_at / 1000 + self.behaviour(job.queue_name).scheduled_s
                if now < scheduled_until:
                    wanted = JobStatus.SCHEDULED
                else:
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
            elif status == "Failed" and _capacity_error(failure) and not engine_job.is_stopping:
                # AWS Batch retries insufficient capacity itself, consuming no retry attempt: back to
                # RUNNABLE at its place; only the latest capacity-failed attempt is kept.
                attempt.status_reason = f"Training job Failed: {failure}"
                job.capacity_failures += 1
                earlier = [
                    each for each in job.attempts[:-1] if "CapacityError" not in (each.status_reason or "")
                ]
                job.attempts = [*earlier, attempt]
                requeued = replace(
                    engine_job,
                    status=JobStatus.RUNNABLE,
                    status_reason=INSUFFICIENT_CAPACITY_REASON,
                    started=None,
                    stop_cause=None,
                    preempted_by=None,
                    awaiting_victims={},
                )
                state = QueueState(state.queue, {**state.jobs, job_id: requeued})
                job.reason_since = now
            elif status == "Stopped" and engine_job.stop_cause is StopCause.TERMINATED:
                attempt.status_reason = "Training job Stopped: service job terminated"
                state = lifecycle.complete_stop(state, job_id)
            else:
                reason = f"Training job {status}: {failure or secondary}"
                attempt.status_reason = reason
                state = lifecycle.finish_job(state, job_id, succeeded=False, reason=reason)
        return state

    def _start_attempt(self, state: QueueState, job: ServiceJob, now: float) -> QueueState:
        job.training_jobs_created += 1
        number = job.training_jobs_created
        base = str(job.payload.get("TrainingJobName") or job.body["jobName"])
        suffix = f"-a{number}"
        name = base[: _TRAINING_JOB_NAME_LENGTH - len(suffix)] + suffix
        request = {**job.payload, "TrainingJobName": name}
        behaviour = self.behaviour(job.queue_name)
        if behaviour.insufficient_capacity > 0:
            behaviour.insufficient_capacity -= 1
            request["HyperParameters"] = {
                **(request.get("HyperParameters") or {}),
                "emulator.duration_s": "0.1",
                "emulator.outcome": "Failed",
                "emulator.failure_reason": CAPACITY_FAILURE,
            }
        try:
            arn = self.training_jobs.create(request)
        except BatchClientError as error:
            state = lifecycle.finish_job(
                state, job.job_id, succeeded=False, reason=f"CreateTrainingJob: {error}"
            )
            return state
        job.attempts.append(Attempt(name, arn, _ms(now)))
        job.scheduled_at = _ms(now)
        if behaviour.scheduled_s > 0:
            return lifecycle.set_status(state, job.job_id, JobStatus.SCHEDULED)
        return lifecycle.set_status(state, job.job_id, JobStatus.STARTING)

    def _follow(self, job: ServiceJob, state: QueueState, now: float) -> None:
        """Copy the engine's status and statusReason onto the service job."""
        engine_job = state.jobs[job.job_id]
        if (engine_job.status, engine_job.status_reason) != (job.status, job.status_reason):
            job.reason_since = now
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


def _capacity_error(failure: str | None) -> bool:
    """SageMaker's FailureReason of a training job that got no capacity (AWS Batch's signal)."""
    return (failure or "").startswith("CapacityError")


def _capacity_error_reason(status_reason: str | None) -> bool:
    return "CapacityError" in (status_reason or "")


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _name_matches(name: str, pattern: str) -> bool:
    if pattern.endswith("*"):
        return name.lower().startswith(pattern[:-1].lower())
    return name.lower() == pattern.lower()
