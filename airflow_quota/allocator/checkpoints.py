"""SageMaker checkpoint reports, read by the allocator's host after a cycle commits (issue 37).

What a preemption loses counts from the victim's last checkpoint (``quota_job.last_checkpoint_at``). A
local task reports its own (its training job record's ``last_checkpoint``), but a SageMaker task waits
deferred on its monitoring trigger while it trains: no task code runs then, and a trigger can neither
touch the database nor write the task's ``task_state_store``. So the host reads them instead, where it
already asks SageMaker to stop victims and orphans (``stops``):

* a cycle lists, for each job holding capacity (not being stopped) whose current lease's record names a
  launched SageMaker training job and its checkpoint prefix (``TrainingJobRecord.checkpoint_uri``), a
  ``CheckpointListing`` in ``CycleReport.checkpoint_listings``, and copies the newest checkpoint the host
  last found for that training job to the ledger, through the same ``record_checkpoint_report`` as a
  local task's report (only a time after the attempt's grant and newer than the one kept counts);
* once the cycle has committed, the host lists the prefix of each one due (``list_checkpoints``): not
  listed for ``checkpoint_listing_interval`` (``[quota]``; 0 lists none), at most
  ``MAX_LISTINGS_PER_ROUND`` per cycle, the longest unlisted first, and keeps the newest ``LastModified``
  (``backends.sagemaker_checkpoints``) in ``SageMakerCheckpoints`` for the next cycle.

An S3 error never fails a job or a cycle: it is logged once per training job (a warning, until a listing
of it succeeds again), the last value found is kept, and the prefix is listed again an interval later. A
connection that cannot be reached at all (no answer, a timeout) is not asked again for its other jobs in
that round: each waits its interval, so an unreachable S3 costs one timeout per connection and interval.
Losing the memory (a restart, another allocator running the next cycle) only means a listing sooner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from botocore.exceptions import ClientError

from airflow_quota.protocol import TrainingJobRecord

if TYPE_CHECKING:
    from airflow_quota.allocator.report import CycleReport
    from airflow_quota.allocator.settings import CycleSettings

log = logging.getLogger(__name__)

#: Most checkpoint prefixes a host lists after one cycle: a scheduler's loop waits for them (a listing
#: is a round trip or two; the rest wait for the next cycle, a second or so later).
MAX_LISTINGS_PER_ROUND: Final = 10

#: Reads the newest checkpoint (UTC) under an S3 prefix: (aws_conn_id, region_name, uri) -> time or None.
CheckpointLister = Callable[[str | None, str | None, str], datetime | None]


@dataclass(frozen=True, slots=True)
class CheckpointListing:
    """A running SageMaker training job whose checkpoint prefix the host lists after the commit."""

    job_id: str
    #: The training job (one attempt of one task instance): what the host keeps its finding under.
    name: str
    #: Its ``CheckpointConfig.S3Uri``.
    uri: str
    aws_conn_id: str | None
    region_name: str | None

    @classmethod
    def of(cls, job_id: str, record: TrainingJobRecord | None) -> CheckpointListing | None:
        """The listing for a job's current record: a launched SageMaker job that names its prefix."""
        if record is None or record.get("backend") != "sagemaker" or record.get("state") != "launched":
            return None
        uri, name = record.get("checkpoint_uri"), record.get("name")
        if not uri or not name:
            return None
        return cls(job_id, name, uri, record.get("aws_conn_id"), record.get("region_name"))

    @property
    def connection(self) -> tuple[str | None, str | None]:
        return self.aws_conn_id, self.region_name


class SageMakerCheckpoints:
    """What a host found under its SageMaker jobs' checkpoint prefixes, kept between its cycles.

    ``list_checkpoints`` fills it after each committed cycle; the next cycle reads it (``newest``). It
    keeps only the training jobs the last cycle listed, so it holds at most one cycle's running jobs.
    """

    __slots__ = ("_failing", "_listed_at", "_newest")

    def __init__(self) -> None:
        #: Training job name -> the newest checkpoint found (UTC).
        self._newest: dict[str, datetime] = {}
        #: Training job name -> when its prefix was last listed (the cycle's ``now``), found or not.
        self._listed_at: dict[str, datetime] = {}
        #: Training jobs whose last listing failed (logged once, until one succeeds).
        self._failing: set[str] = set()

    def newest(self, name: str) -> datetime | None:
        """The newest checkpoint found under training job ``name``'s prefix; None when none was found."""
        return self._newest.get(name)

    def due(
        self, listings: Iterable[CheckpointListing], now: datetime, interval: timedelta
    ) -> list[CheckpointListing]:
        """The listings not listed within ``interval`` before ``now``, the longest unlisted first (never
        listed first; else in the order given), at most ``MAX_LISTINGS_PER_ROUND``; forgets the jobs not
        among ``listings``."""
        by_name = {listing.name: listing for listing in listings}
        for kept in (self._newest, self._listed_at):
            for name in kept.keys() - by_name.keys():
                del kept[name]
        self._failing &= by_name.keys()
        never = datetime.min.replace(tzinfo=UTC)
        due = [
            listing
            for name, listing in by_name.items()
            if name not in self._listed_at or now - self._listed_at[name] >= interval
        ]
        due.sort(key=lambda listing: self._listed_at.get(listing.name, never))  # else in the cycle's order
        return due[:MAX_LISTINGS_PER_ROUND]

    def found(self, listing: CheckpointListing, newest: datetime | None, at: datetime) -> None:
        """The prefix was listed at ``at``: ``newest`` (None: no checkpoint under it yet)."""
        self._listed_at[listing.name] = at
        if listing.name in self._failing:
            self._failing.discard(listing.name)
            log.info(
                "Training job %s: its checkpoint prefix %s can be listed again", listing.name, listing.uri
            )
        if newest is not None:
            kept = self._newest.get(listing.name)
            self._newest[listing.name] = newest if kept is None else max(kept, newest)

    def failed(self, listing: CheckpointListing, at: datetime, error: Exception) -> None:
        """Listing the prefix failed at ``at``: the last value is kept; logged the first time in a row."""
        self._listed_at[listing.name] = at
        if listing.name in self._failing:
            log.debug("Training job %s: listing %s failed again: %s", listing.name, listing.uri, error)
            return
        self._failing.add(listing.name)
        log.warning(
            "Job %s: could not list the checkpoint prefix %s of training job %s (%s); its last checkpoint "
            "stays as last found, and it is listed again later (logged once until it works)",
            listing.job_id,
            listing.uri,
            listing.name,
            error,
        )


def newest_through_s3(aws_conn_id: str | None, region_name: str | None, uri: str) -> datetime | None:
    """The default ``CheckpointLister``: S3 through the process's cached client of the connection."""
    from airflow_quota.backends.sagemaker_checkpoints import newest_checkpoint_through_s3

    return newest_checkpoint_through_s3(aws_conn_id, region_name, uri)


def list_checkpoints(report: CycleReport, settings: CycleSettings) -> None:
    """After a cycle has committed: list the checkpoint prefixes of its ``checkpoint_listings`` that are
    due, and keep what was found in ``settings.sagemaker_checkpoints`` for the next cycle. Never raises
    for S3 (see the module's docstring); does nothing for a skipped cycle, without a memory, or with an
    interval of 0."""
    kept = settings.sagemaker_checkpoints
    interval = settings.checkpoint_listing_interval
    if report.ran_at is None or kept is None or interval <= timedelta(0):
        return
    lister = settings.checkpoint_lister or newest_through_s3
    unreachable: set[tuple[str | None, str | None]] = set()
    for listing in kept.due(report.checkpoint_listings, report.ran_at, interval):
        if listing.connection in unreachable:
            kept.failed(listing, report.ran_at, ConnectionError("its connection did not answer this round"))
            continue
        try:
            newest = lister(listing.aws_conn_id, listing.region_name, listing.uri)
        except Exception as error:  # S3's answer or no answer: never the job's or the cycle's failure
            if not isinstance(error, ClientError):  # no answer from S3: the connection's others wait too
                unreachable.add(listing.connection)
            kept.failed(listing, report.ran_at, error)
            continue
        # A checkpoint is never later than when it was seen (S3's clock may run ahead of this host's).
        kept.found(listing, None if newest is None else min(newest, datetime.now(UTC)), report.ran_at)
