"""The operator's backends are strategies it picks: they never import the operator (no import circle)."""

from __future__ import annotations

from tests.fresh_imports import loaded_after_each

STRATEGIES = (
    "airflow_quota.operators.sagemaker_backend",
    "airflow_quota.operators.local_backend",
    "airflow_quota.operators.batch_backend",
)


def test_no_backend_strategy_imports_the_operator() -> None:
    # The strategies one by one: the first one that loads the operator's module is named.
    loaded = loaded_after_each(STRATEGIES, ["airflow_quota.operators.training"])

    assert loaded == {strategy: [] for strategy in STRATEGIES}
