"""What every Airflow process pays to import the package: no boto3 until something calls AWS.

Every scheduler imports the allocator's executor (``AIRFLOW__CORE__EXECUTOR``), and every DAG file, so every
DAG parse and task process, imports the operator. Neither needs boto3, botocore's service models or the
amazon provider's ``AwsBaseHook`` at import (together about 0.3 CPU-s a process, 2026-12-06): the AWS Batch
strategy imports its hook and botocore's validator when a task first uses them.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Imported only by code that calls AWS (or validates a request against botocore's model).
HEAVY = ("boto3", "botocore.session", "airflow.providers.amazon.aws.hooks.base_aws")


def test_the_executor_and_the_operator_import_no_boto3_and_no_aws_hook() -> None:
    # One clean interpreter imports the scheduler's module, then the DAG files', and says after each which
    # of HEAVY are loaded (`python -X importtime -c "import <module>"` shows the chain that loads one).
    probe = (
        "import importlib, json, sys\n"
        "for module in ('airflow_quota.allocator.executor', 'airflow_quota.operators.training'):\n"
        "    importlib.import_module(module)\n"
        f"    print(json.dumps([module, [name for name in {HEAVY!r} if name in sys.modules]]))\n"
    )

    imported = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )

    assert imported.returncode == 0, imported.stderr
    loaded = dict(json.loads(line) for line in imported.stdout.splitlines() if line.startswith("["))
    assert loaded == {"airflow_quota.allocator.executor": [], "airflow_quota.operators.training": []}
