"""Which local device indices (GPUs) a granted job gets: pure bookkeeping over the indices jobs hold.

The engine counts capacity; this module turns a count into concrete indices (0 .. total-1) for a
``local-gpu`` style unit. The allocator stores each job's indices in the ledger and calls
``assign_devices`` at grant time with the indices of every job still holding capacity. A preempted job
keeps its indices until it has really stopped, so they are free again exactly when the engine grants
them to the job that preempted it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def free_devices(total: int, held: Iterable[Sequence[int]]) -> list[int]:
    """The indices in ``0 .. total-1`` that no job holds, lowest first.

    ``held`` has one entry per job holding devices. Raises ``ValueError`` when an index is out of range
    or held by two jobs (or twice by one): the ledger and the host disagree, and granting more would
    put two trainings on one GPU.
    """
    if total < 0:
        raise ValueError(f"the host's device count must be >= 0, got {total}")
    holder_of: dict[int, int] = {}
    for job_number, indices in enumerate(held):
        for index in indices:
            if not 0 <= index < total:
                raise ValueError(
                    f"device index {index} (held job #{job_number}, indices {list(indices)}) is outside "
                    f"0..{total - 1}: this host has {total} device(s)"
                )
            if index in holder_of:
                other = holder_of[index]
                who = (
                    "twice by the same job" if other == job_number else f"by jobs #{other} and #{job_number}"
                )
                raise ValueError(f"device index {index} is held {who}; a device belongs to one job at a time")
            holder_of[index] = job_number
    return [index for index in range(total) if index not in holder_of]


def assign_devices(total: int, held: Iterable[Sequence[int]], count: int) -> list[int] | None:
    """``count`` free indices, lowest first, or None when fewer than ``count`` are free.

    Same errors as ``free_devices``; ``count`` must be >= 0 (0 gets ``[]``, a job without devices).
    """
    if count < 0:
        raise ValueError(f"a job needs a device count >= 0, got {count}")
    free = free_devices(total, held)
    if len(free) < count:
        return None
    return free[:count]
