"""Whether a local training is certainly gone, told by the host itself (stdlib only, no Airflow import).

When a task process that started a local training dies (its task runner killed with it, a worker crash),
its watchdog stops the training's process group, and the GPUs are free once no process of the group is
left. Airflow learns of the dead task only at its heartbeat timeout; the allocator need not wait for it
when it runs on the same host and can see both processes itself.

The task keeps ``launch_evidence`` in its training job record once the training has started: the host
(its boot and its PID namespace), the training's process group and the task process (its PID and start
time, so a reused PID is not mistaken for it). ``training_certainly_gone`` is True only when all of it can
be checked here and says so: the same boot and PID namespace as the task's (else this process' /proc shows
other processes, or none), the task process gone (nobody is left to launch or report anything on the
lease) and no living process in the training's group (a group with no member can never get one back; a
group ID reused by an unrelated group reads as alive, which only delays the release). Anything it cannot
read counts as "maybe still there".
"""

from __future__ import annotations

import os
from typing import Any

from airflow_quota.backends.local_watchdog import group_alive


def host_identity() -> str | None:
    """This boot of this host and this process' PID namespace, or None where either cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            boot_id = boot.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot_id} {namespace}" if boot_id and namespace else None


def process_started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), while it lives (not a zombie); else None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after it. The start
    # time is the 22nd field, the 20th after comm.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def launch_evidence(pgid: int) -> dict[str, Any] | None:
    """What the task process that started the training of group ``pgid`` keeps in its record; None where
    the host cannot tell (no /proc)."""
    host, pid = host_identity(), os.getpid()
    started = process_started(pid)
    if host is None or started is None:
        return None
    return {"host": host, "pgid": pgid, "task_pid": pid, "task_started": started}


def training_certainly_gone(evidence: Any) -> bool:
    """Whether the training ``evidence`` (``launch_evidence``, as recorded) names is certainly gone, and
    its task process with it, as this host sees it (see the module's docstring)."""
    if not isinstance(evidence, dict):
        return False
    host = evidence.get("host")
    pgid, task_pid, task_started = (
        _positive(evidence.get(key)) for key in ("pgid", "task_pid", "task_started")
    )
    if not isinstance(host, str) or pgid is None or task_pid is None or task_started is None:
        return False
    if host != host_identity():
        return False
    if process_started(task_pid) == task_started:
        return False  # the task process lives: it stops the training and reports the stop itself
    return not group_alive(pgid)


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
