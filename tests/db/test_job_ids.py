"""Job ids always fit the ledger: ids as long as Airflow allows are granted, short ids are as they were.

Against a real, migrated Airflow metadata DB (SQLite and PostgreSQL, which enforces the column's length).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from airflow_quota.allocator.cycle import CycleReport, run_allocation_cycle
from airflow_quota.allocator.job_ids import JOB_ID_PART_LENGTH, job_id_for
from airflow_quota.engine.config import parse_quota_config
from airflow_quota.ledger.models import ID_LENGTH, JOB_ID_LENGTH, JobRow
from airflow_quota.triggers.admission import QuotaAdmissionTrigger
from tests.db.conftest import Database
from tests.db.metadata_rows import insert_deferred_task, reset_for_allocation

pytestmark = pytest.mark.db

QUEUE = "gpu-training"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
#: The longest ids Airflow allows; a run id is anyone's choice who may trigger a run.
LONGEST_DAG_ID = "d" * ID_LENGTH
LONGEST_RUN_ID = "manual__" + "r" * (ID_LENGTH - len("manual__"))
QUOTAS = parse_quota_config(
    {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                "quotaShares": [
                    {
                        "quotaShareName": "team",
                        "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 2}],
                        "resourceSharingConfiguration": {"strategy": "RESERVE"},
                    }
                ],
            }
        ]
    },
    "quotas.yaml",
)


@pytest.fixture
def db(migrated: Database) -> Iterator[Database]:
    reset_for_allocation(
        migrated.engine, dag_id=LONGEST_DAG_ID, run_id=LONGEST_RUN_ID, start=START, quotas=QUOTAS
    )
    yield migrated


def defer(db: Database, task_id: str) -> str:
    """A task instance of the longest dag and run ids, DEFERRED for one GPU; its job id."""
    kwargs = QuotaAdmissionTrigger(
        job_queue=QUEUE,
        job_name="job",
        quota_share_name="team",
        capacity_unit="gpu",
        instance_count=1,
        submitted_at=START.isoformat(),
    ).serialize()[1]
    with db.session() as session, session.begin():
        return insert_deferred_task(
            session, kwargs, dag_id=LONGEST_DAG_ID, run_id=LONGEST_RUN_ID, task_id=task_id, deferred_at=START
        )


def test_tasks_with_the_longest_ids_airflow_allows_are_granted_each_under_its_own_job_id(
    db: Database,
) -> None:
    first = defer(db, "t" * (ID_LENGTH - 1) + "1")
    second = defer(db, "t" * (ID_LENGTH - 1) + "2")

    with db.session() as session, session.begin():
        report: CycleReport = run_allocation_cycle(session, START + timedelta(seconds=1))

    assert {lease.job_id for lease in report.granted} == {first, second}
    assert report.rejected == {}
    with db.session() as session:
        assert set(session.scalars(sa.select(JobRow.job_id))) == {first, second}


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        pytest.param(("train", "run-1", "fine_tune"), "train/run-1/fine_tune/-1/1", id="short_ids_unchanged"),
        pytest.param(
            ("d" * 200, "run-1", "t" * 250),
            f"{'d' * 200}/run-1/{'t' * 250}/-1/1",
            id="long_parts_unchanged_while_the_whole_fits",
        ),
    ],
)
def test_a_job_id_that_fits_is_the_task_instance_s_ids_joined(
    ids: tuple[str, str, str], expected: str
) -> None:
    assert job_id_for(*ids, -1, 1) == expected


def test_a_job_id_too_long_for_its_column_keeps_each_part_s_beginning_and_a_digest_of_it() -> None:
    job_id = job_id_for("d" * ID_LENGTH, "r" * ID_LENGTH, "t" * ID_LENGTH, -(2**31), 2**31 - 1)

    assert len(job_id) <= JOB_ID_LENGTH
    dag, run, task, map_index, try_number = job_id.split("/")
    assert (map_index, try_number) == (str(-(2**31)), str(2**31 - 1))
    for part, letter in ((dag, "d"), (run, "r"), (task, "t")):
        kept, digest = part.split("~")
        assert kept == letter * (JOB_ID_PART_LENGTH - len(digest) - 1)
        assert len(digest) == 16 and int(digest, 16) >= 0
    assert job_id == job_id_for("d" * ID_LENGTH, "r" * ID_LENGTH, "t" * ID_LENGTH, -(2**31), 2**31 - 1)
    other_run = "r" * (ID_LENGTH - 1) + "s"
    assert job_id != job_id_for("d" * ID_LENGTH, other_run, "t" * ID_LENGTH, -(2**31), 2**31 - 1)
