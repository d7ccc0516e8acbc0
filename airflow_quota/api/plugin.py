"""The Airflow plugin: the quota app (REST API and page) mounted at ``/quota`` and "GPU Quotas" in the nav.

Registered twice, as Airflow needs for a provider's plugin to load with the default configuration: the
``airflow.plugins`` entry point (always read) and ``plugins`` in the provider info (read only when
``[core] lazy_discover_providers`` is off; the second registration is then skipped with a warning).
Every Airflow process loads plugins (the scheduler, the dag processor, each task), but only the api-server
serves them, so only there is the app built (as the edge3 provider does): elsewhere the plugin is empty and
imports nothing more.
"""

from __future__ import annotations

import sys
from typing import Any

from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/quota"


def serving_api() -> bool:
    """Whether this process is the api-server (its uvicorn workers inherit its command line)."""
    return len(sys.argv) > 1 and sys.argv[1] == "api-server"


def _fastapi_apps() -> list[dict[str, Any]]:
    if not serving_api():
        return []
    from airflow_quota.api.app import create_quota_app

    return [{"app": create_quota_app(), "url_prefix": URL_PREFIX, "name": "GPU quotas"}]


def _external_views() -> list[dict[str, Any]]:
    if not serving_api():
        return []
    # At the top of Airflow's navigation, shown in the UI's frame (href and icon relative to the UI's base).
    return [
        {
            "name": "GPU Quotas",
            "href": f"{URL_PREFIX.lstrip('/')}/",
            "url_route": "gpu-quotas",
            "destination": "nav",
            "nav_top_level": True,
            "icon": f"{URL_PREFIX.lstrip('/')}/static/gpu.svg",
        },
        # A "Quota" tab on every task instance: its jobs' waits, grants, preemptions and resumes. Airflow
        # fills in the placeholders ({MAP_INDEX} only for a mapped task).
        {
            "name": "Quota",
            "href": f"{URL_PREFIX.lstrip('/')}/task-instance"
            "?dagId={DAG_ID}&runId={RUN_ID}&taskId={TASK_ID}&mapIndex={MAP_INDEX}",
            "url_route": "quota",
            "destination": "task_instance",
            "icon": f"{URL_PREFIX.lstrip('/')}/static/gpu.svg",
        },
    ]


class QuotaPlugin(AirflowPlugin):
    name = "airflow_quota"
    fastapi_apps = _fastapi_apps()
    external_views = _external_views()
