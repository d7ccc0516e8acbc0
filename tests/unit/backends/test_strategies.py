"""The operator's backends are strategies it picks: they never import the operator (no import circle)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "strategy",
    [
        "airflow_quota.operators.sagemaker_backend",
        "airflow_quota.operators.local_backend",
        "airflow_quota.operators.batch_backend",
    ],
)
def test_a_backend_strategy_imports_without_the_operator(strategy: str) -> None:
    probe = f"import sys, {strategy}; print('airflow_quota.operators.training' in sys.modules)"

    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    assert imported.stdout.strip() == "False"
