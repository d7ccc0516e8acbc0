"""The quota FastAPI app: the REST API under ``/api``, the page, and its script and stylesheet.

Airflow mounts it at ``/quota`` on the api-server (``plugin.py``); its OpenAPI document is at
``/quota/openapi.json`` and its interactive docs at ``/quota/docs``.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from airflow_quota.api.page import STATIC_DIR, page_router
from airflow_quota.api.routes import router


def create_quota_app() -> FastAPI:
    app = FastAPI(
        title="Airflow GPU quotas",
        version="1",
        description=(
            "AWS Batch-style GPU quota management for Airflow: job queues, quota shares with their usage "
            "(own, borrowed, lent, idle), jobs, the audit log and a GetJobQueueSnapshot-like view; and the "
            "administrator's changes (a share, a job's priority, terminating a job). Authenticate with a JWT "
            "from the api-server's `POST /auth/token` (`Authorization: Bearer ...`) or the UI's session "
            "cookie. Reading needs read access to pools, writing edit access to pools."
        ),
    )
    app.include_router(router, prefix="/api")
    app.include_router(page_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="quota-static")
    return app
