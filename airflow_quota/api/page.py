"""The "GPU Quotas" page: one HTML document and a small script that reads the JSON API every few seconds.

``/quota/`` shows every job queue; ``/quota/shares/<job queue>/<share>`` is the same page focused on one
share (the operator's extra link points there). Both need a logged-in user who may read quotas: without
one the browser is sent to the auth manager's login page and comes back after it.
"""

from __future__ import annotations

import html
from pathlib import Path

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import get_user
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from airflow_quota.api.access import pool_access

STATIC_DIR = Path(__file__).parent / "static"
#: Seconds between two refreshes of the page's data.
REFRESH_SECONDS = 5

page_router = APIRouter(include_in_schema=False)


@page_router.get("/")
async def quota_page(request: Request) -> Response:
    return await _page(request, None, None)


@page_router.get("/shares/{job_queue_name}/{quota_share_name}")
async def share_page(request: Request, job_queue_name: str, quota_share_name: str) -> Response:
    return await _page(request, job_queue_name, quota_share_name)


async def _page(request: Request, job_queue_name: str | None, quota_share_name: str | None) -> Response:
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
    title = "GPU Quotas" if quota_share_name is None else f"GPU Quotas: {quota_share_name}"
    attributes = {
        "data-api": f"{mount}/api",
        "data-airflow-base": f"{airflow_base}/",
        "data-refresh-seconds": str(REFRESH_SECONDS),
        "data-job-queue": job_queue_name or "",
        "data-quota-share": quota_share_name or "",
        "data-user": user.get_name(),
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
<script src="{html.escape(mount)}/static/quota.js"></script>
</body>
</html>
"""
    return HTMLResponse(document, headers={"Cache-Control": "no-store"})
