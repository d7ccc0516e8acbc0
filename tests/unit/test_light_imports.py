"""What every Airflow process pays to import the package: no boto3 until something calls AWS.

Every scheduler imports the allocator's executor (``AIRFLOW__CORE__EXECUTOR``), and every DAG file, so every
DAG parse and task process, imports the operator. Neither needs boto3, botocore's service models or the
amazon provider's ``AwsBaseHook`` at import (together about 0.3 CPU-s a process, 2026-12-06): the AWS Batch
strategy imports its hook and botocore's validator when a task first uses them.
"""

from __future__ import annotations

from tests.fresh_imports import loaded_after_each

#: Imported only by code that calls AWS (or validates a request against botocore's model).
HEAVY = ("boto3", "botocore.session", "airflow.providers.amazon.aws.hooks.base_aws")


def test_the_executor_and_the_operator_import_no_boto3_and_no_aws_hook() -> None:
    # The scheduler's module, then the DAG files' (`python -X importtime -c "import <module>"` shows the
    # chain that loads one of HEAVY).
    modules = ("airflow_quota.allocator.executor", "airflow_quota.operators.training")
    loaded = loaded_after_each(modules, HEAVY)

    assert loaded == {module: [] for module in modules}
