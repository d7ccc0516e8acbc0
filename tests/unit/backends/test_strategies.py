"""The operator's backends are strategies it picks: they never import the operator (no import circle)."""

from __future__ import annotations

import json
import subprocess
import sys

STRATEGIES = (
    "airflow_quota.operators.sagemaker_backend",
    "airflow_quota.operators.local_backend",
    "airflow_quota.operators.batch_backend",
)


def test_no_backend_strategy_imports_the_operator() -> None:
    # One clean interpreter imports the strategies one by one and says after each whether the operator's
    # module is loaded yet: the first one that loads it is named, as a process per strategy would.
    probe = (
        "import importlib, json, sys\n"
        f"for strategy in {STRATEGIES!r}:\n"
        "    importlib.import_module(strategy)\n"
        "    print(json.dumps([strategy, 'airflow_quota.operators.training' in sys.modules]))\n"
    )

    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    loaded = dict(json.loads(line) for line in imported.stdout.splitlines())
    assert loaded == dict.fromkeys(STRATEGIES, False)
