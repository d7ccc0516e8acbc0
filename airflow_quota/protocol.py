"""What the allocator (scheduler side) and a quota task (worker and triggerer side) say to each other.

Task code cannot touch the metadata database in Airflow 3, so the two sides talk only through Airflow's
own channels, and this module names every message:

* **Grant** (allocator -> waiting task): the task deferred on ``QuotaAdmissionTrigger`` is resumed
  (``next_method``) with a ``Grant`` payload. ``ti_id`` guards against a lease of an earlier try
  (a task cleared while it ran resumes the new try with the old event): ignore a grant whose ``ti_id``
  is not the running task instance's and defer for admission again.
* **Rejection** (allocator -> waiting task): the same resume, with ``{"rejected": True, "reason": ...}``
  when the request can never be granted (unknown share, share DISABLED, preemption retries exhausted,
  terminated by an admin). The task fails with ``reason``.
* **Handover to AWS Batch** (allocator -> waiting task): on a job queue whose applied quota file says
  ``scheduler: AWS_BATCH``, a request new to the ledger is resumed with a ``SchedulerHandover``
  (``{"scheduler": "AWS_BATCH", "job_id": ...}``) instead of a grant, and holds no lease: the task submits
  (or re-attaches to) its AWS Batch service job and follows it; AWS Batch admits, preempts and re-queues
  it (``allocator/aws_batch_queues.py``, ``operators/batch_backend.py``).
* **Preemption** (allocator -> granted task), two channels, both keyed by ``lease_id`` (ignore a signal
  for another lease, it is stale):

  - a task deferred on its monitoring trigger is resumed with ``{"preempt": True, ...}`` (a
    ``Preempt`` payload), exactly like a fired trigger event; the trigger's ``on_kill`` runs;
  - the allocator also writes the same ``Preempt`` document (JSON) under ``PREEMPT_KEY`` in the task
    instance's ``task_state_store``; a task running in a worker polls it (every second or so) and
    checks it before it defers on its monitoring trigger.

  Either way the task stops its training job, waits until it has really stopped, deletes
  ``PREEMPT_KEY``, records the stop under ``TRAINING_JOB_KEY`` and defers on ``QuotaAdmissionTrigger``
  again with ``released_lease_id`` set and ``attempt`` + 1. That deferral is the stop report: only then
  does the allocator count the capacity free. (A task preempted before it heard of its grant is still
  deferred for admission, naming no lease: the grant is withdrawn and counts as no preempted attempt.)
* **Training job record** (task -> allocator): under ``TRAINING_JOB_KEY`` in ``task_state_store``
  the task keeps a ``TrainingJobRecord`` (JSON) of its current attempt, written before the training job
  is created and updated when it ends. The allocator reads it when a task instance ends while holding
  capacity: a record still ``launched`` means a training job may still run on that capacity (an
  orphan), which is stopped before the capacity is released, unless the task instance is up for
  retry: then the capacity is kept, and the retry's admission request takes it over (its grant says
  ``reattach``) so the retry re-attaches to the running training job instead of launching a second.
  While the job holds capacity, the allocator also copies the training's newest checkpoint to the ledger
  each cycle (``quota_job.last_checkpoint_at``): what a preemption's lost work counts from. A local task
  reports it in the record (``last_checkpoint``); a SageMaker task cannot while it waits deferred on its
  monitoring trigger (no task code runs, and a trigger cannot write ``task_state_store``), so it records
  its training job's checkpoint prefix (``checkpoint_uri``) and the allocator's host lists that prefix
  itself after a cycle commits, at most once per ``[quota] checkpoint_listing_interval``
  (``allocator/checkpoints.py``).
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict

#: Capacity units whose name starts with this are the worker's own GPUs: their grants name device
#: indices (``Grant.devices``), and only the local backend trains on them (the rule: ``engine.devices``).
from airflow_quota.engine.devices import LOCAL_UNIT_PREFIX as LOCAL_UNIT_PREFIX

#: ``task_state_store`` key of the allocator's preemption signal (a JSON ``Preempt`` document).
PREEMPT_KEY = "quota.preempt"
#: ``task_state_store`` key of the task's current training job (a JSON ``TrainingJobRecord``).
TRAINING_JOB_KEY = "quota.training_job"
#: The admission event that hands a task to AWS Batch (a ``SchedulerHandover``): ``{"scheduler":
#: "AWS_BATCH", ...}``, sent (instead of a grant) to a task waiting on a job queue whose quota file entry
#: says ``scheduler: AWS_BATCH``.
SCHEDULER_EVENT_KEY: Final = "scheduler"
AWS_BATCH: Final = "AWS_BATCH"

Backend = Literal["sagemaker", "local"]


class Grant(TypedDict):
    """The event a granted task is resumed with."""

    lease_id: str  # "<job_id>#<attempt>"
    job_id: str  # the ledger's job id: dag_id/run_id/task_id/map_index/try_number
    ti_id: str  # the task instance the grant is for
    try_number: int
    attempt: int  # 1 for the first grant of this job, +1 per grant after a preemption
    capacityUnit: str
    instanceCount: int
    borrowed: int  # how many of instanceCount are borrowed from other shares
    granted_at: str  # ISO 8601, UTC
    #: The job's first submission (ISO 8601, UTC): a task that started waiting from the triggerer
    #: (``start_from_trigger``, no worker run before its first grant) learns it here.
    submitted_at: str
    #: Set when this try took over the capacity of its previous try, which ended (worker crash, task
    #: failure) while its training job still ran: re-attach to the training job named under
    #: ``TRAINING_JOB_KEY`` (and record it under this grant's lease) instead of launching a new one.
    reattach: NotRequired[bool]
    #: Local GPUs: the device indices granted (CUDA_VISIBLE_DEVICES), when the unit is a local one.
    devices: NotRequired[list[int]]


class Rejection(TypedDict):
    """The event a waiting task is resumed with when its request can never be granted."""

    rejected: Literal[True]
    job_id: str
    reason: str


class SchedulerHandover(TypedDict):
    """The event a waiting task is resumed with when AWS Batch, not our allocator, schedules its queue."""

    scheduler: Literal["AWS_BATCH"]
    job_id: str  # the job id the request would have had in the ledger (it records nothing for it)


class Preempt(TypedDict):
    """The preemption signal: a resume event for a deferred task, or a ``task_state_store`` value."""

    preempt: Literal[True]
    lease_id: str
    job_id: str
    preempted_by: str | None  # the preemptor's job id; None when an admin terminated the job
    rule: str | None  # PreemptionRule value, or "TERMINATED"
    reason: str  # the victim's statusReason, for the task log
    at: str  # ISO 8601, UTC


class TrainingJobRecord(TypedDict):
    """What the task launched for one attempt, and whether it has ended."""

    backend: Backend
    name: str  # the SageMaker training job name, or the local process' name
    attempt: int
    lease_id: str
    state: Literal["launched", "ended"]
    #: An ended job that did not complete: how it ended, one line ("Failed: The training entry point was
    #: killed by SIGKILL after 3.2 s."), for the ledger's reason when its try ends.
    ended_as: NotRequired[str]
    #: Local: SIGTERM -> SIGKILL seconds; an orphaned process group may live this long after its task.
    grace_period: NotRequired[float]
    #: Local, once the training started: its host, process group and task process
    #: (``backends.local_evidence.launch_evidence``), by which an allocator on the same host can tell that
    #: the training and its task are gone before Airflow notices the dead task.
    process: NotRequired[dict[str, Any]]
    #: Local: when the attempt's training last saved a checkpoint (ISO 8601, UTC), as the task last saw it:
    #: the newest file's mtime under its checkpoint directory (``backends.local.newest_checkpoint``). The
    #: allocator copies it to the ledger (``quota_job.last_checkpoint_at``): a preemption's lost work counts
    #: from it. A SageMaker task leaves it out (it trains deferred): see ``checkpoint_uri``.
    last_checkpoint: NotRequired[str]
    #: SageMaker, once its training job was created or re-attached to: the job's ``CheckpointConfig.S3Uri``
    #: (as DescribeTrainingJob says). While the job holds capacity, the allocator's host lists it through
    #: the record's connection (``aws_conn_id``, ``region_name``) every ``[quota]
    #: checkpoint_listing_interval``; the newest object's LastModified (a name starting with a dot or ending
    #: in ``.tmp`` does not count) is the training's last checkpoint, copied to the ledger as above.
    checkpoint_uri: NotRequired[str]
    #: SageMaker: the training job's ARN, once its CreateTrainingJob answered (the API's serviceResourceId).
    arn: NotRequired[str]
    #: SageMaker: the connection to stop an orphaned training job with.
    aws_conn_id: NotRequired[str | None]
    region_name: NotRequired[str | None]
