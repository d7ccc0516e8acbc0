"""Job ids always fit the ledger: ids as long as Airflow allows are granted, short ids are as they were.

Against a real, migrated Airflow metadata DB (SQLite and PostgreSQL, which enforces the column's length),
with the task instances and helpers of the fault isolation tests.
"""

from __future__ import annotations

import pytest

from airflow_quota.allocator.cycle import JOB_ID_PART_LENGTH, job_id_for
from airflow_quota.ledger.models import ID_LENGTH, JOB_ID_LENGTH
from tests.db.conftest import Database
from tests.db.test_allocator_isolation import QUEUE_A, cycle, db, defer, ledger_job_ids

pytestmark = pytest.mark.db

__all__ = ["db"]  # the fixture, shared with the fault isolation tests

LONGEST_DAG_ID = "d" * ID_LENGTH
#: A run id anyone who triggers a run may choose, as long as Airflow allows.
LONGEST_RUN_ID = "manual__" + "r" * (ID_LENGTH - len("manual__"))


def test_tasks_with_the_longest_ids_airflow_allows_are_granted_each_under_its_own_job_id(
    db: Database,
) -> None:
    first = defer(db, "t" * (ID_LENGTH - 1) + "1", QUEUE_A, dag_id=LONGEST_DAG_ID, run_id=LONGEST_RUN_ID)
    second = defer(db, "t" * (ID_LENGTH - 1) + "2", QUEUE_A, dag_id=LONGEST_DAG_ID, run_id=LONGEST_RUN_ID)

    report = cycle(db, 1)

    assert {lease.job_id for lease in report.granted} == {first, second}
    assert ledger_job_ids(db) == {first, second}
    assert report.rejected == {}


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
    assert job_id != job_id_for(
        "d" * ID_LENGTH, "r" * (ID_LENGTH - 1) + "s", "t" * ID_LENGTH, -(2**31), 2**31 - 1
    )
