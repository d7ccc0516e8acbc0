"""The "GPU Quotas" page: one HTML document and a small script that reads the JSON API every few seconds.

``/quota/`` shows every job queue; ``/quota/shares/<job queue>/<share>`` is the same page focused on one
share (the operator's extra link points there); ``/quota/task-instance?dagId=&runId=&taskId=&mapIndex=`` is a
task instance's "Quota" view (its jobs' own timeline), a tab of the task instance in Airflow's UI. All need
a logged-in user who may read quotas: without one the browser is sent to the auth manager's login page and
comes back after it.
"""

from __future__ import annotations

import html
from pathlib import Path

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import get_user
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from airflow_quota.api.access import pool_access
from airflow_quota.ledger.models import AuditKind

STATIC_DIR = Path(__file__).parent / "static"
#: Seconds between two refreshes of the page's data.
REFRESH_SECONDS = 5

page_router = APIRouter(include_in_schema=False)


@page_router.get("/")
async def quota_page(request: Request) -> Response:
    return await _page(request, "GPU Quotas", {}, "quota.js")


@page_router.get("/shares/{job_queue_name}/{quota_share_name}")
async def share_page(request: Request, job_queue_name: str, quota_share_name: str) -> Response:
    focus = {"data-job-queue": job_queue_name, "data-quota-share": quota_share_name}
    return await _page(request, f"GPU Quotas: {quota_share_name}", focus, "quota.js")


@page_router.get("/task-instance")
async def task_instance_page(
    request: Request, dagId: str = "", runId: str = "", taskId: str = "", mapIndex: str = "-1"
) -> Response:
    """The "Quota" view of a task instance in Airflow's UI: its jobs' own timeline. Airflow fills the
    ``{MAP_INDEX}`` of the view's address only for a mapped task: anything but a number means unmapped."""
    task = {
        "data-dag-id": dagId,
        "data-run-id": runId,
        "data-task-id": taskId,
        "data-map-index": mapIndex if mapIndex.lstrip("-").isdigit() else "-1",
    }
    return await _page(request, f"Quota: {taskId}", task, "quota-task.js")


async def _page(request: Request, title: str, focus: dict[str, str], script: str) -> Response:
    try:
        user = await get_user(request, None, None)
    except HTTPException:
        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
    try:
        await pool_access("GET")(request, user)
    except HTTPException:
        return HTMLResponse(
            "<h1>403 Forbidden</h1><p>Read access to pools is needed to see GPU quotas.</p>", status_code=403
        )
    mount = request.scope.get("root_path", "").rstrip("/")  # where the quota app is mounted: <base>/quota
    airflow_base = mount.removesuffix("/quota")
    attributes = {
        "data-api": f"{mount}/api",
        "data-airflow-base": f"{airflow_base}/",
        "data-refresh-seconds": str(REFRESH_SECONDS),
        "data-job-queue": "",
        "data-quota-share": "",
        "data-user": user.get_name(),
        # The auth manager's login page: a page whose session ended links there, with next= back to it.
        "data-login": get_auth_manager().get_url_login(),
        # The audit log's decision kinds: the Recent decisions' kind filter offers each.
        "data-decision-kinds": " ".join(kind.value for kind in AuditKind),
        **focus,
    }
    body_attributes = " ".join(f'{name}="{html.escape(value)}"' for name, value in attributes.items())
    document = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<link rel="stylesheet" href="{html.escape(mount)}/static/quota.css">
</head>
<body {body_attributes}>
<header>
  <h1 id="title">{html.escape(title)}</h1>
  <span id="status" class="muted">Loading…</span>
</header>
<div id="error" class="error" hidden></div>
<main id="content"></main>
<script src="{html.escape(mount)}/static/vendor/echarts.min.js"></script>
<script src="{html.escape(mount)}/static/quota-timeline.js"></script>
<script src="{html.escape(mount)}/static/{script}"></script>
</body>
</html>
"""
    return HTMLResponse(document, headers={"Cache-Control": "no-store"})
