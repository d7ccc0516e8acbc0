"""The Airflow plugin: the quota app (REST API, the page's bundle) at ``/quota`` and "GPU Quotas" in the nav.

Registered twice, as Airflow needs for a provider's plugin to load with the default configuration: the
``airflow.plugins`` entry point (always read) and ``plugins`` in the provider info (read only when
``[core] lazy_discover_providers`` is off; the second registration is then skipped with a warning).
Every Airflow process loads plugins (the scheduler, the dag processor, each task), but only the api-server
serves them, so only there is the app built (as the edge3 provider does): elsewhere the plugin is empty and
imports nothing more.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
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


def bundle_version() -> str:
    """The first 12 hex digits of the page's sources' hash, as its build recorded it (static/app)."""
    record = Path(__file__).parent / "static" / "app" / "sources.json"
    try:
        return str(json.loads(record.read_text())["sha256"])[:12]
    except (OSError, ValueError, KeyError):
        return "unbuilt"


def _react_apps() -> list[dict[str, Any]]:
    """The GPU Quotas page, drawn by Airflow's own UI (React, Chakra UI, its theme): at the top of its
    navigation, and as a "Quota" tab of every task instance (Airflow 3.3's UI routes
    ``dags/:dagId/runs/:runId/tasks/:taskId[/mapped/:mapIndex]/plugin/:page`` to a react app of destination
    ``task_instance`` and passes it those route parameters). Addresses are relative to the UI's base (its
    ``<base href>``: the UI resolves ``bundle_url`` against ``document.baseURI``), so a base URL with a path
    needs nothing more."""
    if not serving_api():
        return []
    # The sources' hash in the address: a browser never runs a cached bundle of another version. The task
    # view's address differs too: the UI imports each react app's bundle_url as a module, once per address.
    bundle = f"{URL_PREFIX.lstrip('/')}/static/app/main.umd.cjs?v={bundle_version()}"
    icon = f"{URL_PREFIX.lstrip('/')}/static/gpu.svg"
    return [
        {
            "name": "GPU Quotas",
            "bundle_url": bundle,
            "url_route": "gpu-quotas",
            "destination": "nav",
            "nav_top_level": True,
            "icon": icon,
        },
        # Its jobs' waits, grants, preemptions and resumes: the same bundle, given the task instance.
        {
            "name": "Quota",
            "bundle_url": f"{bundle}&view=task-instance",
            "url_route": "quota",
            "destination": "task_instance",
            "icon": icon,
        },
    ]


class QuotaPlugin(AirflowPlugin):
    name = "airflow_quota"
    fastapi_apps = _fastapi_apps()
    react_apps = _react_apps()
