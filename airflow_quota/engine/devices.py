"""Which local device indices (GPUs) a granted job gets: pure bookkeeping over the indices jobs hold.

The engine counts capacity; this module turns a count into concrete indices (0 .. total-1) for a
``local-gpu`` style unit. The allocator stores each job's indices in the ledger and calls
``assign_devices`` at grant time with the indices of every job still holding capacity. A preempted job
keeps its indices until it has really stopped, so they are free again exactly when the engine grants
them to the job that preempted it.

The capacity may change under held indices: after a queue's ``maxCapacity`` is lowered from 4 to 3, a
job may still hold index 3. It keeps it until it releases it, and it still counts against the capacity
(the engine counts each job's units, wherever they are), so the queue never runs more trainings than
its capacity; a new grant gets free indices among 0..2 only, so index 3 is never handed out again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: Capacity units whose name starts with this are the host's own GPUs: their grants name device indices.
#: The host's GPUs are one set of indices, so a quota file names one such unit, in one job queue.
LOCAL_UNIT_PREFIX = "local-"


def is_local_unit(unit: str) -> bool:
    """Whether ``unit`` is the host's own GPUs (its grants name device indices)."""
    return unit.startswith(LOCAL_UNIT_PREFIX)


def assign_devices(total: int, held: Iterable[Sequence[int]], count: int) -> list[int] | None:
    """``count`` indices in ``0 .. total-1`` that no job holds, lowest first, or None when fewer are free.

    ``held`` has one entry per job holding devices; an index at or beyond ``total`` (held since before
    the capacity was lowered) is left to its job and never given. ``count`` 0 gets ``[]`` (a job
    without devices). Time and memory grow with the indices held and ``count``, never with ``total``.

    Raises ``ValueError`` for a negative ``total`` or ``count``, and when the ledger's holdings are
    impossible (a negative index, or one index held by two jobs, or twice by one): the ledger and the
    host disagree, and that needs a person, not another grant.
    """
    if total < 0:
        raise ValueError(f"the host's device count must be >= 0, got {total}")
    if count < 0:
        raise ValueError(f"a job needs a device count >= 0, got {count}")
    taken = _held_indices(held)
    devices: list[int] = []
    index = 0
    while len(devices) < count and index < total:  # at most count + len(taken) steps
        if index not in taken:
            devices.append(index)
        index += 1
    return devices if len(devices) == count else None


def _held_indices(held: Iterable[Sequence[int]]) -> set[int]:
    """Every index some job holds; ``ValueError`` when one is negative or held twice."""
    holder_of: dict[int, int] = {}
    for job_number, indices in enumerate(held):
        for index in indices:
            if index < 0:
                raise ValueError(
                    f"device index {index} (held job #{job_number}, indices {list(indices)}) is negative: "
                    "device indices count from 0"
                )
            if index in holder_of:
                other = holder_of[index]
                who = (
                    "twice by the same job" if other == job_number else f"by jobs #{other} and #{job_number}"
                )
                raise ValueError(f"device index {index} is held {who}; a device belongs to one job at a time")
            holder_of[index] = job_number
    return set(holder_of)
