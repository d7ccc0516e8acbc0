"""The quota FastAPI app: the REST API under ``/api``, the page, and its script and stylesheet.

Airflow mounts it at ``/quota`` on the api-server (``plugin.py``); its OpenAPI document is at
``/quota/openapi.json`` and its interactive docs at ``/quota/docs``.
"""

from __future__ import annotations

import mimetypes

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from airflow_quota.api.page import STATIC_DIR, page_router
from airflow_quota.api.routes import router
from airflow_quota.ledger.errors import AppliedConfigError


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
    # The page's bundle (static/app/main.umd.cjs): Airflow's UI imports it as a module, which browsers
    # load only when it is served as JavaScript.
    mimetypes.add_type("text/javascript", ".cjs")
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="quota-static")
    app.add_exception_handler(AppliedConfigError, _applied_config_conflict)
    return app


async def _applied_config_conflict(request: Request, error: Exception) -> JSONResponse:
    """A job queue whose applied configuration no longer validates: 409 saying how to fix it, not 500."""
    return JSONResponse(status_code=status.HTTP_409_CONFLICT, content={"detail": str(error)})
