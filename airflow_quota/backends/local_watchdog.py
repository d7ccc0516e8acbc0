"""Stops a local training's process group when the task process that started it dies, even by SIGKILL.

``LocalTrainingRun.start`` launches this file as a script (stdlib only, no package import) in a session
of its own, beside the training's process group::

    python local_watchdog.py TASK_PID TRAINING_PGID GRACE_SECONDS [OUTPUT_FD]

While the task process lives, the watchdog only watches; it exits by itself once the training group is
gone, and the task terminates it after a run. When its parent changes (the task died and the watchdog
was re-parented), it does what a stop does: SIGTERM to the whole training group, SIGKILL to what is left
after GRACE_SECONDS, then waits until the group is gone.

OUTPUT_FD is the read end of the training's output pipe, which the watchdog holds but never reads while
the task lives. Once the task is dead it reads it, copying each line to its own stderr (the task's
stderr, which may still be read by whoever ran the task), so a training that prints while it saves its
checkpoint is neither killed by a broken pipe nor blocked by a full one.

``group_alive``, ``living_group_members`` and ``signal_group`` are shared with the backend.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

#: How often the task process is checked (the reaction time to its death).
PARENT_CHECK_SECONDS = 0.2
#: How often the training group is checked while the task lives.
GROUP_CHECK_SECONDS = 1.0
#: How long to relay the training's last output once its group is gone.
OUTPUT_DRAIN_SECONDS = 2.0
#: How long SIGKILLed processes may take to disappear (a process in the GPU driver can take a moment).
KILL_WAIT_SECONDS = 60.0


def living_group_members(pgid: int) -> list[int]:
    """PIDs of the processes in group ``pgid`` that have not exited (zombies count as exited).

    A zombie has released its memory, GPU memory included; it only waits for its parent (or init) to
    read its exit status, which an init that never reaps would make wait forever. On systems without
    ``/proc`` a group that still answers ``killpg(pgid, 0)`` is reported as its leader.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        return [pgid]
    if not os.path.isdir("/proc/self"):
        return [pgid]
    members: list[int] = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat_file:
                    stat = stat_file.read()
            except OSError:
                continue
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so split after it.
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                members.append(int(entry.name))
    return members


def group_alive(pgid: int) -> bool:
    """Whether group ``pgid`` has a living member; cheap while its leader lives (no /proc scan)."""
    try:
        with open(f"/proc/{pgid}/stat", "rb") as stat_file:
            stat = stat_file.read()
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    except (OSError, IndexError, ValueError):
        pass
    return bool(living_group_members(pgid))


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to every process of group ``pgid``; a group already gone is not an error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def wait_until_gone(pgid: int, seconds: float, poll: float = 0.1) -> bool:
    """Wait up to ``seconds`` for group ``pgid`` to have no living member; True when it is gone."""
    deadline = time.monotonic() + seconds
    while group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def stop_group(pgid: int, grace_seconds: float) -> bool:
    """SIGTERM the group, SIGKILL it after ``grace_seconds``; True when SIGKILL was needed."""
    signal_group(pgid, signal.SIGTERM)
    if wait_until_gone(pgid, grace_seconds):
        return False
    signal_group(pgid, signal.SIGKILL)
    wait_until_gone(pgid, KILL_WAIT_SECONDS)
    return True


def watch(task_pid: int, pgid: int, grace_seconds: float, output_fd: int | None = None) -> int:
    """Watch until the training group is gone, stopping it if the task process dies first."""
    next_group_check = 0.0
    while True:
        if os.getppid() != task_pid:
            break
        now = time.monotonic()
        if now >= next_group_check:
            if not group_alive(pgid):
                return 0
            next_group_check = now + GROUP_CHECK_SECONDS
        time.sleep(PARENT_CHECK_SECONDS)
    _say(f"task process {task_pid} is gone: stopping training process group {pgid} (SIGTERM)")
    relay = None
    if output_fd is not None:
        relay = threading.Thread(target=_relay_output, args=(output_fd,), daemon=True)
        relay.start()
    if stop_group(pgid, grace_seconds):
        _say(f"training process group {pgid} outlived its {grace_seconds:g} s grace period: SIGKILLed")
    else:
        _say(f"training process group {pgid} has stopped")
    if relay is not None:
        relay.join(OUTPUT_DRAIN_SECONDS)
    return 0


def _relay_output(output_fd: int) -> None:
    with os.fdopen(output_fd, "rb") as output:
        for raw in output:
            _say("training output: " + raw.decode("utf-8", errors="replace").rstrip("\r\n"))


def _say(message: str) -> None:
    # The task's stderr may be a pipe nobody reads any more; the stop matters more than the message.
    with contextlib.suppress(OSError, ValueError):
        print(f"local_watchdog: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (3, 4):
        print("usage: local_watchdog.py TASK_PID TRAINING_PGID GRACE_SECONDS [OUTPUT_FD]", file=sys.stderr)
        return 2
    task_pid, pgid, grace_seconds = int(argv[0]), int(argv[1]), float(argv[2])
    output_fd = int(argv[3]) if len(argv) == 4 else None
    return watch(task_pid, pgid, grace_seconds, output_fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
