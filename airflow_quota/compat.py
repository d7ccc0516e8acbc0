"""The parts of Airflow this provider uses that Airflow does not publish, in one place.

Task code (operators, triggers, links) uses only public paths (``airflow.sdk``, ``airflow.triggers.base``,
the common-compat provider). The allocator runs in the scheduler and needs some of Airflow core's own
modules; those without a public path are imported here and nowhere else. On an Airflow where one moved, the
package fails at import with an error naming it and the Airflow version, and tests/unit/test_compat.py
names every one that moved.
"""

from __future__ import annotations

from airflow import __version__ as AIRFLOW_VERSION

#: The Airflow versions this provider supports (pyproject.toml pins the same range; README says why).
SUPPORTED_AIRFLOW = ">=3.3,<3.4"

try:
    # Airflow core's metrics: the module its scheduler, executors and api-server initialize and emit through
    # (``airflow.sdk.observability.stats`` is the task SDK's own copy, not set up in the scheduler).
    from airflow.observability import stats as Stats
    from airflow.observability.metrics.stats_utils import get_stats_factory
except ImportError as error:  # pragma: no cover - only on an Airflow this provider does not support
    raise ImportError(
        f"airflow-quota supports apache-airflow{SUPPORTED_AIRFLOW}; on Airflow {AIRFLOW_VERSION}: {error}. "
        "Install a supported Airflow."
    ) from error

__all__ = ["AIRFLOW_VERSION", "SUPPORTED_AIRFLOW", "Stats", "get_stats_factory"]
