"""One job queue's part of a cycle (``QueuePart``): what every step of it reads, claims and reports.

The steps themselves are ``open_jobs`` (reconcile), ``admission`` (requests), the planning in ``cycle``
and ``decisions`` (grants, preemptions); each works on the ``QueuePart`` it is given.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from airflow.models.taskinstance import TaskInstance
from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_quota.allocator.job_ids import lease_id_of
from airflow_quota.allocator.reconcile import TaskView
from airflow_quota.allocator.report import CycleReport
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.allocator.stops import StopRequest
from airflow_quota.allocator.tasks import WaitingTask, claim_waiting, task_instances
from airflow_quota.engine.model import JobStatus, QueueState
from airflow_quota.ledger.errors import LedgerError
from airflow_quota.ledger.generation import QueueMark
from airflow_quota.ledger.models import JobRow
from airflow_quota.protocol import TrainingJobRecord

if TYPE_CHECKING:
    from airflow_quota.allocator.kept_state import KeptQueue


@dataclass(frozen=True, slots=True)
class Waiting:
    """One task instance deferred on the admission trigger, as read (claimed only to be resumed)."""

    job_id: str
    task: WaitingTask
    settled: bool

    @property
    def kwargs(self) -> dict[str, Any]:
        return self.task.kwargs


#: A ``Waiting``'s job id.
JOB_ID = attrgetter("job_id")


@dataclass(slots=True)
class QueuePart:
    """One job queue's part of a cycle: its inputs, what it read and claimed, its part of the report."""

    session: Session
    now: datetime
    settings: CycleSettings
    views: dict[str, TaskView]
    records: dict[str, TrainingJobRecord]
    report: CycleReport
    #: The rows of the queue being allocated read so far (``row`` and ``preload`` add the ones read later;
    #: with a kept state, the RUNNABLE ones are read only when the cycle touches them).
    rows: dict[str, JobRow] = field(default_factory=dict)
    #: The queue's open jobs when its part began (job ids): the ones the ledger knows as not final.
    open_ids: set[str] = field(default_factory=set)
    #: The RUNNABLE ones among them (job ids). Until the plan, each of them still in the queue's state is
    #: RUNNABLE: the steps before it change a RUNNABLE job only by ending it (a waiting job whose try is
    #: over), and add new jobs, so the RUNNABLE jobs of a later state are these (those still in it) and
    #: some of the others (``runnable_ids``): found without a pass over the 10,000 waiting jobs.
    runnable: set[str] = field(default_factory=set)
    #: The queue's revision and generation read at its start, when its state may be kept (``kept_state``).
    mark: QueueMark | None = None
    #: What was kept of the queue when the part starts from its state as is (``kept_state``): the queue is
    #: as the last committed cycle left it.
    kept: KeptQueue | None = None
    #: Waiting jobs whose task instance this cycle claimed (True) or could not claim (False), by job id.
    claims: dict[str, bool] = field(default_factory=dict)
    #: The claimed task instances loaded to be resumed, by job id.
    task_instances: dict[str, TaskInstance] = field(default_factory=dict)
    #: Jobs whose training job this cycle listed in ``report.stop_requests`` (each once).
    listed: set[str] = field(default_factory=set)
    #: The latest list of waiting tasks ``ids`` was asked about, and its job ids (in order, and as a set).
    waiting_ids: tuple[list[Waiting], list[str], set[str]] | None = None

    def ids(self, waiting: list[Waiting]) -> tuple[list[str], set[str]]:
        """The job ids of ``waiting``, in order and as a set (a job id is one task instance's try: each
        once); worked out once per list, which the steps of the part pass on as it is when nothing in it
        changes. Kept by the list's identity: a list given here must not be changed in place afterwards (the
        steps make new lists: ``only``, ``compress``)."""
        known = self.waiting_ids
        if known is None or known[0] is not waiting:
            ids = list(map(JOB_ID, waiting))
            known = self.waiting_ids = (waiting, ids, set(ids))
        return known[1], known[2]

    def only(self, waiting: list[Waiting], job_ids: AbstractSet[str]) -> list[Waiting]:
        """The waiting tasks of ``job_ids``, in their order in ``waiting`` (picked out in C)."""
        if not job_ids:
            return []
        return list(compress(waiting, map(job_ids.__contains__, self.ids(waiting)[0])))

    def runnable_ids(self, state: QueueState) -> set[str]:
        """The RUNNABLE jobs of ``state`` (job ids), a state of this part before its plan."""
        jobs, runnable = state.jobs, JobStatus.RUNNABLE
        ids = self.runnable & jobs.keys()
        ids.update(job_id for job_id in jobs.keys() - self.runnable if jobs[job_id].status is runnable)
        return ids

    def row(self, job_id: str) -> JobRow:
        row = self.rows.get(job_id) or self.session.get(JobRow, job_id)
        if row is None:
            raise LedgerError(f"job {job_id} is not in the quota ledger")
        self.rows[job_id] = row
        return row

    def preload(self, job_ids: list[str]) -> None:
        """Read the rows of ``job_ids`` not read yet in one query (``row`` then finds them)."""
        missing = [job_id for job_id in job_ids if job_id not in self.rows]
        for start in range(0, len(missing), 500):
            query = select(JobRow).where(JobRow.job_id.in_(missing[start : start + 500]))
            self.rows.update((row.job_id, row) for row in self.session.scalars(query))

    def claim(self, waiting: list[Waiting]) -> None:
        """Claim the task instances of ``waiting`` not claimed yet this cycle (``claims``)."""
        todo = [each for each in waiting if each.job_id not in self.claims]
        if not todo:
            return
        claimed = claim_waiting(self.session, [each.task for each in todo])
        for each in todo:
            self.claims[each.job_id] = each.task.id in claimed

    def load(self, waiting: list[Waiting]) -> None:
        """Load the claimed task instances of ``waiting`` that are to be resumed (``task_instances``)."""
        todo = [each for each in waiting if each.job_id not in self.task_instances]
        if not todo:
            return
        loaded = task_instances(self.session, [each.task.id for each in todo])
        for each in todo:
            self.task_instances[each.job_id] = loaded[each.task.id]

    def task_instance(self, waiting: Waiting) -> TaskInstance:
        """The task instance of a claimed waiting job, to resume it."""
        self.load([waiting])
        return self.task_instances[waiting.job_id]

    def current_record(self, row: JobRow) -> TrainingJobRecord | None:
        """What the task recorded about its training job under the job's current lease, if anything."""
        record = self.records.get(row.job_id)
        return record if record is not None and record.get("lease_id") == lease_id_of(row) else None

    def launched(self, row: JobRow) -> TrainingJobRecord | None:
        """The training job the task launched on the job's current lease, when it may still run."""
        record = self.current_record(row)
        return record if record is not None and record.get("state") == "launched" else None

    def list_victim(self, row: JobRow) -> None:
        """List a told-to-stop job's SageMaker training job in ``stop_requests`` (every cycle while it
        is being stopped, from its decision on), for the host to ask and describe after the commit."""
        record = self.launched(row)
        if row.stop_signalled_at is None or record is None or record.get("backend") != "sagemaker":
            return
        self.list_stop(StopRequest(row.job_id, record, victim=True))

    def list_stop(self, request: StopRequest) -> None:
        """Add ``request`` to ``report.stop_requests`` unless its job is listed already this cycle."""
        if request.job_id not in self.listed:
            self.listed.add(request.job_id)
            self.report.stop_requests.append(request)
