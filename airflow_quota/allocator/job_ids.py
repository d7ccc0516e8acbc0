"""The ledger's names for a task instance's job and for its grants: job ids and lease ids."""

from __future__ import annotations

from airflow_quota.ids import bounded_id
from airflow_quota.ledger.models import JOB_ID_LENGTH, JobRow

#: When a whole job id would not fit its column, each id part longer than this is cut (see ``job_id_for``).
JOB_ID_PART_LENGTH = 160


def job_id_for(dag_id: str, run_id: str, task_id: str, map_index: int, try_number: int) -> str:
    """A task instance's job id: one job per try; a requeued job keeps it, a retry or clear is a new job.

    ``<dag_id>/<run_id>/<task_id>/<map_index>/<try_number>``, always within the ledger's ``JOB_ID_LENGTH``:
    Airflow allows 250 characters for each id, and anyone who triggers a run may choose its run id. When the
    whole would not fit, each part longer than ``JOB_ID_PART_LENGTH`` keeps its beginning and ends with
    ``~`` and 16 hex digits of its SHA-256: the id stays readable, unique and the same in every cycle.
    """
    job_id = f"{dag_id}/{run_id}/{task_id}/{map_index}/{try_number}"
    if len(job_id) <= JOB_ID_LENGTH:
        return job_id
    dag_id, run_id, task_id = (bounded_id(part, JOB_ID_PART_LENGTH) for part in (dag_id, run_id, task_id))
    return f"{dag_id}/{run_id}/{task_id}/{map_index}/{try_number}"


def lease_id_of(row: JobRow) -> str:
    """The lease of a job's current (or last) grant: its job id and attempt."""
    return f"{row.job_id}#{row.attempt}"
