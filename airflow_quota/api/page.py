"""The old addresses of the GPU Quotas page, now drawn by Airflow's own UI (the plugin's ``react_apps``).

The page is a React app in Airflow's UI (source ``airflow_quota/api/www``, built to ``static/app``):
``<base>/plugin/gpu-quotas`` shows every job queue, ``<base>/plugin/gpu-quotas/shares/<queue>/<share>`` one
share, and a task instance's "Quota" tab is ``<base>/dags/<dag>/runs/<run>/tasks/<task>[/mapped/<i>]/plugin/
quota``. The addresses the page had before (``/quota/``, ``/quota/shares/<queue>/<share>``, which the
operator's extra link names, and ``/quota/task-instance?dagId=&runId=&taskId=&mapIndex=``) redirect there;
Airflow's UI asks for a log-in itself when there is no session. ``static/`` keeps the timeline script and
stylesheet the simulator's HTML report embeds (``quota-timeline.js``, ``quota.css``, ``vendor/``).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

STATIC_DIR = Path(__file__).parent / "static"
#: Seconds between two refreshes of the page's data (the React page's own constant says the same).
REFRESH_SECONDS = 5

page_router = APIRouter(include_in_schema=False)


def _airflow(request: Request, path: str) -> RedirectResponse:
    """A redirect to ``path`` of Airflow's UI under its base URL (the quota app is at <base>/quota)."""
    mount = request.scope.get("root_path", "").rstrip("/")
    return RedirectResponse(f"{mount.removesuffix('/quota')}{path}", status_code=303)


@page_router.get("/")
async def quota_page(request: Request) -> RedirectResponse:
    return _airflow(request, "/plugin/gpu-quotas")


@page_router.get("/shares/{job_queue_name}/{quota_share_name}")
async def share_page(request: Request, job_queue_name: str, quota_share_name: str) -> RedirectResponse:
    return _airflow(
        request,
        f"/plugin/gpu-quotas/shares/{quote(job_queue_name, safe='')}/{quote(quota_share_name, safe='')}",
    )


@page_router.get("/task-instance")
async def task_instance_page(
    request: Request, dagId: str = "", runId: str = "", taskId: str = "", mapIndex: str = "-1"
) -> RedirectResponse:
    """The task instance's "Quota" tab in Airflow's UI; a ``mapIndex`` that is not a number means unmapped."""
    mapped = f"/mapped/{int(mapIndex)}" if mapIndex.lstrip("-").isdigit() and int(mapIndex) >= 0 else ""
    path = "/".join(quote(part, safe="") for part in (dagId, runId, taskId))
    dag, run, task = path.split("/")
    return _airflow(request, f"/dags/{dag}/runs/{run}/tasks/{task}{mapped}/plugin/quota")
