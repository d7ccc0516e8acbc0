"""What a quota task reads and keeps in its ``task_state_store`` (the keys: ``airflow_quota.protocol``).

The allocator writes its ``Preempt`` signal there; the task keeps its ``TrainingJobRecord`` there (for
the allocator, and for its own later runs and tries), and the request a ``ModelTrainer`` or a factory
gave its try. Values are JSON documents, read back as dicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow.sdk import (  # type: ignore[attr-defined]  # NEVER_EXPIRE: in __all__, not in the SDK's .pyi
    NEVER_EXPIRE,
)

from airflow_quota.protocol import PREEMPT_KEY, TRAINING_JOB_KEY, TrainingJobRecord

#: ``task_state_store`` key of the request a ``ModelTrainer`` or a factory gave this try: made at the try's
#: first run and read back by its later runs (grants, preemptions), so a ModelTrainer is compiled (and its
#: ``source_code`` uploaded) once per try, whatever its attempts. The task's own: the allocator ignores it.
REQUEST_KEY = "quota.request"
#: ``task_state_store`` key of the try's capacity errors so far (``{"try_number", "count"}``): how long
#: the next backoff is. The task's own: the allocator ignores it.
CAPACITY_RETRY_KEY = "quota.capacity_retry"


def read_document(value: Any) -> dict[str, Any] | None:
    """A ``task_state_store`` value as a dict (the allocator writes JSON documents)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return dict(value) if isinstance(value, Mapping) else None


def preempt_signal(store: Any, lease_id: str) -> dict[str, Any] | None:
    """The allocator's ``Preempt`` for this lease, if any; a signal for another lease is stale."""
    signal = read_document(store.get(PREEMPT_KEY))
    if not signal or not signal.get("preempt"):
        return None
    return signal if signal.get("lease_id") == lease_id else None


def training_job_record_in(store: Any) -> dict[str, Any] | None:
    """The ``TrainingJobRecord`` the task last kept (any try), or None."""
    return read_document(store.get(TRAINING_JOB_KEY))


def keep_training_job_record(store: Any, record: TrainingJobRecord) -> None:
    """Keep ``record`` for good: the allocator may read it long after the task's last run."""
    value: Any = dict(record)
    store.set(TRAINING_JOB_KEY, value, retention=NEVER_EXPIRE)
