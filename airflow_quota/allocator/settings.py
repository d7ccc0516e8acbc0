"""The allocator's tunables, as one cycle receives them (``[quota]`` in airflow.cfg, read by ``host``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from airflow_quota.allocator import default_setting
from airflow_quota.allocator.checkpoints import CheckpointLister, SageMakerCheckpoints
from airflow_quota.allocator.stops import JobStopper, StoppedTrainingJobs

if TYPE_CHECKING:
    from airflow_quota.allocator.kept_state import KeptQueues


@dataclass(frozen=True, slots=True)
class CycleSettings:
    """The allocator's tunables (``[quota]`` in airflow.cfg, read by ``host.cycle_settings``); each
    defaults to the setting's default in the provider info."""

    #: A task that deferred from a worker run less than this ago is not resumed yet: a stale
    #: "defer-exit" executor event can fail a task resumed sooner (apache/airflow#71580, #72716).
    settle_time: timedelta = timedelta(seconds=default_setting("settle_time"))
    #: A job signalled to stop that has not reported stopped after this is cleared (the last resort).
    stop_deadline: timedelta = timedelta(seconds=default_setting("stop_deadline"))
    #: An orphaned training job not confirmed stopped after this has its capacity released anyway.
    orphan_timeout: timedelta = timedelta(seconds=default_setting("orphan_timeout"))
    #: Most requests new to the ledger a cycle records per job queue, the earliest submitted first (0: no
    #: bound); the others stay deferred, untouched, for the next cycles (``cycle._within_batch``).
    max_new_requests: int = int(default_setting("max_new_requests"))
    #: How ``request_stops`` asks training jobs to stop once a cycle has committed (victims and
    #: orphans); by default through their backend (``stop_through_backend``).
    job_stopper: JobStopper | None = None
    #: The host's memory of the training jobs it found stopped, shared by every cycle it runs (a mutable
    #: object in these frozen settings: ``request_stops`` updates it, the cycle reads it). None: nothing
    #: is remembered, so an orphaned SageMaker training job keeps its capacity until ``orphan_timeout``,
    #: and a victim's until its task reports its stop.
    stopped_training_jobs: StoppedTrainingJobs | None = None
    #: The host's queues kept between cycles (``kept_state``; a mutable object like the one above: the
    #: cycle fills it, the host says when the cycle committed). None: every cycle reads every queue whole.
    kept_queues: KeptQueues | None = None
    #: How long the host waits before it lists a running SageMaker training job's checkpoint prefix again
    #: (``checkpoints.list_checkpoints``); 0: never listed (SageMaker jobs' lost work counts from their
    #: start).
    checkpoint_listing_interval: timedelta = timedelta(seconds=default_setting("checkpoint_listing_interval"))
    #: The host's memory of the newest checkpoint under each SageMaker job's prefix (a mutable object like
    #: the ones above: ``list_checkpoints`` fills it, the cycle copies it to the ledger). None: SageMaker
    #: jobs' checkpoints are not listed.
    sagemaker_checkpoints: SageMakerCheckpoints | None = None
    #: How ``list_checkpoints`` reads a prefix; by default S3 (``checkpoints.newest_through_s3``).
    checkpoint_lister: CheckpointLister | None = None
