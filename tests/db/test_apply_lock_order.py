"""A quota file applied while an allocation cycle holds its queues: the two take the queue rows in the same
(name) order, so whatever order the file lists its queues in, one waits for the other and neither is
aborted by a deadlock (PostgreSQL; SQLite locks the whole file, so there both simply wait in turn).

The cycle's side is what a kept-state cycle does per queue, in name order: ``read_mark(..., lock=True)``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import text

from airflow_quota.engine.config import parse_quota_config
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.generation import read_mark
from tests.db.conftest import Database

pytestmark = pytest.mark.db


def quotas(gpus: int, *queue_names: str) -> Any:
    """A quota file listing ``queue_names`` in that order, each of ``gpus`` GPUs and one team."""
    return parse_quota_config(
        {
            "jobQueues": [
                {
                    "jobQueueName": name,
                    "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": gpus}],
                    "quotaShares": [
                        {
                            "quotaShareName": "team",
                            "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": gpus}],
                            "resourceSharingConfiguration": {"strategy": "RESERVE"},
                            "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
                        }
                    ],
                }
                for name in queue_names
            ]
        },
        source="test",
    )


def test_a_file_listing_queues_out_of_name_order_waits_for_a_cycle_and_is_not_aborted(
    migrated: Database,
) -> None:
    if migrated.backend != "postgresql":
        pytest.skip("SQLite takes one lock for the whole file: no order of row locks to get wrong there")
    with migrated.session() as session, session.begin():
        apply_quota_config(session, quotas(2, "queue-a", "queue-b"), applied_by="test", source="first")

    outcome: dict[str, Any] = {}

    def apply_in_file_order() -> None:  # queue-b listed first, both changed
        try:
            with migrated.session() as session, session.begin():
                session.execute(text("SET LOCAL lock_timeout = '20s'"))
                apply_quota_config(
                    session, quotas(4, "queue-b", "queue-a"), applied_by="test", source="second"
                )
            outcome["applied"] = True
        except Exception as error:  # reported by the assertion below
            outcome["error"] = error

    with migrated.session() as cycle, cycle.begin():
        cycle.execute(text("SET LOCAL lock_timeout = '20s'"))
        read_mark(cycle, "queue-a", lock=True)  # a cycle's first queue
        applying = threading.Thread(target=apply_in_file_order)
        applying.start()
        time.sleep(
            1.5
        )  # the apply is now waiting on a lock the cycle holds (PostgreSQL's deadlock check: 1 s)
        assert applying.is_alive(), outcome
        read_mark(cycle, "queue-b", lock=True)  # the cycle's next queue: free, the apply took nothing yet
    applying.join(30)

    assert outcome == {"applied": True}
    with migrated.session() as session:  # both queues changed by the second file
        marks = [read_mark(session, name) for name in ("queue-a", "queue-b")]
        assert [mark.revision if mark else None for mark in marks] == [2, 2]
