"""AWS Batch's ``jobStateTimeLimitActions`` on a job queue our allocator schedules (issue 35): a RUNNABLE
job that has waited with the action's reason for ``maxTimeSeconds`` is terminated by a real allocation
cycle, its task resumed with the rejection; one below the limit waits on. With the host's kept state, so
the cycle's "nothing changed" shortcut is in play. Against a real, migrated Airflow metadata DB (SQLite and
PostgreSQL), as ``test_allocator_lifecycle``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from airflow_quota.allocator.kept_state import KeptQueues
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.engine.config import parse_quota_config
from airflow_quota.engine.model import QUOTA_MANAGEMENT_LIMIT_EXCEEDED
from airflow_quota.ledger.configuration import apply_quota_config
from airflow_quota.ledger.models import AuditKind
from tests.db.allocation import QUEUE, START, defer
from tests.db.conftest import Database
from tests.db.test_allocator_cycle import audit, db, job
from tests.db.test_allocator_lifecycle import at, cycle

pytestmark = pytest.mark.db
__all__ = ["db"]  # the fixture this module borrows

LIMIT = 600
LIMITED = parse_quota_config(
    {
        "jobQueues": [
            {
                "jobQueueName": QUEUE,
                "capacityLimits": [{"capacityUnit": "gpu", "maxCapacity": 4}],
                "jobStateTimeLimitActions": [
                    {
                        "reason": QUOTA_MANAGEMENT_LIMIT_EXCEEDED,
                        "state": "RUNNABLE",
                        "maxTimeSeconds": LIMIT,
                        "action": "TERMINATE",
                    }
                ],
                "quotaShares": [
                    {
                        "quotaShareName": "team-a",
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
def limited(db: Database) -> Iterator[Database]:
    with db.session() as session, session.begin():
        apply_quota_config(session, LIMITED, applied_by="test", source="quotas.yaml", now=START)
    yield db


def test_a_job_waiting_with_the_reason_past_the_limit_is_terminated_and_one_below_it_is_not(
    limited: Database,
) -> None:
    settings = CycleSettings(settle_time=timedelta(seconds=5), kept_queues=KeptQueues())
    # Three gpus: more than team-a's two can ever hold (its queue has four).
    early = defer(limited, "early", gpus=3)
    cycle(limited, 1, **vars_of(settings))
    assert job(limited, early).status_reason == QUOTA_MANAGEMENT_LIMIT_EXCEEDED
    cycle(limited, 2, **vars_of(settings))  # the reason first seen by the time limit
    late = defer(limited, "late", gpus=3, deferred_at=at(300))
    for seconds in (301, 302, 303, 400, 500):  # quiet cycles: nothing changes
        cycle(limited, seconds, **vars_of(settings))
    assert job(limited, early).status == job(limited, late).status == "RUNNABLE"

    cycle(limited, 1 + LIMIT, **vars_of(settings))  # below the limit by a second: still waiting
    assert job(limited, early).status == "RUNNABLE"

    report = cycle(limited, 2 + LIMIT, **vars_of(settings))

    assert report.time_limited == [early]
    row = job(limited, early)
    assert row.status == "FAILED"
    assert row.status_reason.startswith(
        f"Terminated by JobStateTimeLimit action due to reason: {QUOTA_MANAGEMENT_LIMIT_EXCEEDED}"
    )
    assert [each.job_id for each in audit(limited, AuditKind.TERMINATED)] == [early]
    assert report.rejected == {early: row.status_reason}  # its task resumed with the rejection
    assert job(limited, late).status == "RUNNABLE"

    later = cycle(limited, 303 + LIMIT, **vars_of(settings))  # 'late' has waited with it since 302
    assert later.time_limited == [late]


def vars_of(settings: CycleSettings) -> dict[str, object]:
    """``settings`` as keyword arguments for ``cycle`` (the same kept state across cycles)."""
    return {name: getattr(settings, name) for name in ("settle_time", "kept_queues")}
