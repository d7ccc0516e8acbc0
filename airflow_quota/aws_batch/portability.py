"""What AWS Batch would refuse or read otherwise in a design our allocator accepts: warnings, not errors,
so a quota file stays portable (``airflow quota validate`` and ``export`` print them), and the refusals
``apply --to-aws`` checks before its first call (``aws_refusals``)."""

from __future__ import annotations

from airflow_quota.engine.config import ConfigIssue, QuotaConfig, aws_batch_warnings
from airflow_quota.engine.devices import is_local_unit

#: The capacity units AWS Batch's quota management counts: SageMaker instance types (its user guide).
SAGEMAKER_UNIT_PREFIX = "ml."


def portability_warnings(config: QuotaConfig) -> list[ConfigIssue]:
    """What AWS Batch would refuse or read otherwise, though our allocator accepts it (paths in our file)."""
    return _issues(config, refusals=False)


def aws_refusals(config: QuotaConfig) -> list[ConfigIssue]:
    """What AWS Batch would refuse in the design (paths in our file): more quota shares or capacity limits
    than it allows, a capacity unit that is not a SageMaker instance type, a ``maxCapacity`` of 0. A share
    without ``preemptionConfiguration`` is not one: export writes ``inSharePreemption: DISABLED``."""
    return _issues(config, refusals=True)


def _issues(config: QuotaConfig, *, refusals: bool) -> list[ConfigIssue]:
    issues = aws_batch_warnings(config)  # more shares or capacity limits than AWS allows
    for queue_index, queue in enumerate(config.job_queues):
        queue_path = f"jobQueues[{queue_index}]"
        for limit_index, limit in enumerate(queue.capacity_limits):
            path = f"{queue_path}.capacityLimits[{limit_index}]"
            if is_local_unit(limit.capacity_unit):
                issues.append(
                    ConfigIssue(
                        f"{path}.capacityUnit",
                        f"{limit.capacity_unit} is the Airflow worker's own GPUs: AWS Batch schedules "
                        "SageMaker instance types (ml.*) only, so keep this job queue on our allocator",
                    )
                )
            elif refusals and not limit.capacity_unit.startswith(SAGEMAKER_UNIT_PREFIX):
                issues.append(
                    ConfigIssue(
                        f"{path}.capacityUnit",
                        f"{limit.capacity_unit} is not a SageMaker instance type: AWS Batch's quota shares "
                        "count instance types (ml.*, e.g. ml.g5.xlarge); use one, or keep this job queue "
                        "on our allocator and out of apply --to-aws",
                    )
                )
            if limit.max_capacity == 0:
                issues.append(_zero_warning(f"{path}.maxCapacity", "the service environment"))
        for share_index, share in enumerate(queue.quota_shares):
            share_path = f"{queue_path}.quotaShares[{share_index}]"
            if not refusals and "preemption_configuration" not in share.model_fields_set:
                issues.append(
                    ConfigIssue(
                        f"{share_path}.preemptionConfiguration",
                        "missing: here it means inSharePreemption DISABLED, but AWS Batch's CreateQuotaShare "
                        "requires it; write preemptionConfiguration: {inSharePreemption: DISABLED}",
                    )
                )
            for limit_index, limit in enumerate(share.capacity_limits):
                if limit.max_capacity == 0:
                    issues.append(
                        _zero_warning(
                            f"{share_path}.capacityLimits[{limit_index}].maxCapacity", "a quota share"
                        )
                    )
    return issues


def _zero_warning(path: str, what: str) -> ConfigIssue:
    return ConfigIssue(
        path,
        f"maxCapacity 0: here {what} then holds none of this unit (a share may still borrow with borrowLimit "
        "-1), but AWS Batch documents no meaning for 0 (its borrowLimit is a percentage of maxCapacity) and "
        "may refuse it; give at least 1 before applying this design to AWS Batch",
    )
