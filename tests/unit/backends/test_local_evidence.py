"""``training_certainly_gone`` says "gone" only when this host can see both processes gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from airflow_quota.backends.local_evidence import host_identity, launch_evidence, training_certainly_gone


def _evidence_of_a_finished_process() -> dict[str, Any]:
    """The evidence a task process kept before it ended (its training group was itself: gone too)."""
    code = "import json; from airflow_quota.backends.local_evidence import launch_evidence as e; import os; "
    code += "print(json.dumps(e(os.getpid())))"
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    evidence: dict[str, Any] = json.loads(printed.stdout)
    return evidence


def test_gone_only_when_the_task_process_and_the_group_are_both_gone_on_this_host() -> None:
    gone = _evidence_of_a_finished_process()
    alive = launch_evidence(os.getpgrp())  # this process (the "task") and its group live
    assert alive is not None and gone["host"] == host_identity()

    assert training_certainly_gone(gone)
    assert not training_certainly_gone(alive)  # the task process lives: it reports its stop itself
    assert not training_certainly_gone(gone | {"host": "another-boot pid:[1]"})  # another host or container
    assert not training_certainly_gone(gone | {"pgid": os.getpgrp()})  # this test's group lives
    for missing in ("host", "pgid", "task_pid", "task_started"):
        assert not training_certainly_gone({key: value for key, value in gone.items() if key != missing})
    assert not training_certainly_gone(gone | {"pgid": True})
    assert not training_certainly_gone(None)
