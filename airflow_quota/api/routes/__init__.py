"""The REST API over the quota ledger, served by the Airflow api-server under ``/quota/api``: one module per
resource (job queues, quota shares, jobs, the audit log, timelines), each an ``APIRouter`` gathered in
``router``.

Every route needs a user of Airflow's auth manager (a ``Bearer`` JWT from ``POST /auth/token``, or the UI's
session cookie) with pool permissions (``api/access.py``): none gives 401, too few 403. Writes go through the
same code as the CLI: a share update is validated like a quota file and applied with ``apply_quota_config``
(a new revision, audited); priority changes and terminations use the ledger's ``record_*`` helpers (audited).
A refused write changes nothing and says why (4xx).
"""

from __future__ import annotations

from fastapi import APIRouter

from airflow_quota.api.routes import events, job_queues, jobs, shares, timeline
from airflow_quota.api.schemas import ERRORS

router = APIRouter(responses=ERRORS)
for resource in (job_queues, shares, jobs, events, timeline):
    router.include_router(resource.router)
