"""Trigger one demo round: a DAG run of each demo DAG under one run id, through the api-server's REST API.

``scripts/demo.sh`` calls it with the api-server's address, the run id and the DAG ids; it logs in as the
``admin`` user that ``airflow standalone`` generated
(``$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated``).
One small process instead of an ``airflow dags trigger`` command per DAG (each an Airflow start: about
3 CPU-seconds). With ``--parsed`` it triggers nothing and answers whether the dag processor has written
each DAG to the database (exit status 0) or not yet (1): what ``scripts/demo.sh`` waits for before it prints
the URL, instead of an ``airflow dags list`` per try.

Usage: ``python demo/trigger_round.py [--parsed] http://localhost:8080 [demo-20260101-120000] DAG_ID...``
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

USER = "admin"
TRIES = 3
RETRY_SECONDS = 1.0


def post(url: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


def trigger(url: str, run_id: str, token: str) -> None:
    """POST the DAG run; tried again when the api-server's SQLite was busy (it answers 500 "Database error",
    and may have created the run all the same: a retry answered 409 then finds it made)."""
    for attempt in range(TRIES):
        try:
            post(url, {"dag_run_id": run_id, "logical_date": None}, token)
            return
        except urllib.error.HTTPError as error:
            if error.code == 409 and attempt > 0:  # made by the try that answered 500
                return
            if error.code < 500 or attempt == TRIES - 1:
                raise
        time.sleep(RETRY_SECONDS)


def login(base_url: str) -> str:
    """A token for the ``admin`` user, with the password ``airflow standalone`` generated."""
    passwords = Path(os.environ["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
    password = json.loads(passwords.read_text())[USER]
    token: str = post(f"{base_url}/auth/token", {"username": USER, "password": password})["access_token"]
    return token


def parsed(base_url: str, dag_ids: list[str]) -> bool:
    """Whether the api-server knows each DAG (the dag processor has parsed its file): GET answers 200, or
    404 for a DAG not parsed yet; anything else (the api-server not up, no password file yet) is not yet."""
    try:
        token = login(base_url)
        for dag_id in dag_ids:
            request = urllib.request.Request(
                f"{base_url}/api/v2/dags/{dag_id}", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(request, timeout=10):
                pass
    except (OSError, KeyError, ValueError):
        return False
    return True


def main(argv: list[str]) -> int:
    if argv[:1] == ["--parsed"] and len(argv) >= 3:
        return 0 if parsed(argv[1], argv[2:]) else 1
    if len(argv) < 3 or argv[0].startswith("--"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    base_url, run_id, *dag_ids = argv
    try:
        token = login(base_url)
        for dag_id in dag_ids:
            trigger(f"{base_url}/api/v2/dags/{dag_id}/dagRuns", run_id, token)
    except (OSError, KeyError, ValueError) as error:
        detail = error.read().decode(errors="replace") if isinstance(error, urllib.error.HTTPError) else ""
        message = f"demo: could not trigger run {run_id} at {base_url}: {error} {detail}"
        print(message.rstrip(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
