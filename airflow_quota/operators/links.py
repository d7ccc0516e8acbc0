"""Extra links of QuotaTrainingOperator: its training job in the SageMaker console, its AWS Batch service job
in the AWS Batch console (on a job queue AWS Batch schedules), its share's page.

Airflow lists them on the task instance; they appear in the UI once the provider registers them
(``extra-links`` in ``get_provider_info``). The console link is the amazon provider's ``BaseAwsLink``
(its partition-to-domain map, its XCom read, its formatting).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.providers.amazon.aws.links.base_aws import BASE_AWS_CONSOLE_LINK, BaseAwsLink
from airflow.providers.common.compat.sdk import XCom
from airflow.sdk import BaseOperatorLink, conf

from airflow_quota.operators.batch_backend import SERVICE_JOB_XCOM_KEY

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

    from airflow_quota.operators.backend import ConsoleLink

#: XCom key under which the operator keeps its current training job (name, region, console domain).
TRAINING_JOB_XCOM_KEY = "quota_training_job"


def _arn_parts(arn: str | None) -> tuple[str, str] | None:
    """``(partition, region)`` of an ARN (``arn:<partition>:<service>:<region>:...``), or None."""
    parts = (arn or "").split(":")
    if len(parts) < 6 or parts[0] != "arn" or not parts[1] or not parts[3]:
        return None
    return parts[1], parts[3]


class SageMakerTrainingJobLink(BaseAwsLink):
    """The task's latest training job in the SageMaker console."""

    name = "SageMaker training job"
    key = TRAINING_JOB_XCOM_KEY
    format_str = BASE_AWS_CONSOLE_LINK + "/sagemaker/home?region={region_name}#/jobs/{training_job_name}"

    @classmethod
    def xcom_value(cls, link: ConsoleLink | None) -> dict[str, Any]:
        """What the operator pushes under ``key``: ``persist``'s document (empty for no link).

        Pushed by the operator itself rather than through ``persist``, which skips the push when the task's
        ``do_xcom_push`` is off: the link shows whether or not the task pushes its return value.
        """
        if link is None:
            return {}
        return {
            "region_name": link.region_name,
            "aws_domain": cls.get_aws_domain(link.partition),
            "training_job_name": link.training_job_name,
        }

    @classmethod
    def xcom_value_of_arn(cls, training_job_arn: str | None) -> dict[str, Any]:
        """``xcom_value`` for a training job known by its ARN (an AWS Batch service job's latest attempt,
        ``arn:<partition>:sagemaker:<region>:<account>:training-job/<name>``); empty when it is not one."""
        where = _arn_parts(training_job_arn)
        if where is None or ":training-job/" not in str(training_job_arn):
            return {}
        partition, region = where
        return {
            "region_name": region,
            "aws_domain": cls.get_aws_domain(partition),
            "training_job_name": str(training_job_arn).rsplit("/", 1)[-1],
        }

    def format_link(self, **kwargs: Any) -> str:
        if "aws_domain" not in kwargs and "partition" in kwargs:  # pushed by airflow-quota 0.3.0 or older
            kwargs["aws_domain"] = self.get_aws_domain(kwargs["partition"])
        return str(super().format_link(**kwargs))


class BatchServiceJobLink(BaseAwsLink):
    """The task's AWS Batch service job in the AWS Batch console (a job queue AWS Batch schedules).

    Read from what the operator pushes when it submits the job (``SERVICE_JOB_XCOM_KEY``: its id and ARN);
    the console's region and domain come from the ARN. Empty on a queue our allocator schedules.
    """

    name = "AWS Batch service job"
    key = SERVICE_JOB_XCOM_KEY
    format_str = BASE_AWS_CONSOLE_LINK + "/batch/home?region={region_name}#jobs/detail/{job_id}"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """The link, read as ``BaseAwsLink`` reads it only when the task pushed its service job. The task
        runner fills every extra link as a task ends, and on a queue our allocator schedules there is no
        service job: asking for the missing XCom itself makes Airflow's supervisor log "XCom not found" as
        an error at the end of every such task. A slice of the key's values is an empty answer instead,
        logged by nobody."""
        pushed = XCom.get_all(
            key=self.key, dag_id=ti_key.dag_id, task_id=ti_key.task_id, run_id=ti_key.run_id
        )
        return str(super().get_link(operator, ti_key=ti_key)) if pushed else ""

    def format_link(self, **kwargs: Any) -> str:
        where = _arn_parts(kwargs.get("job_arn"))
        if where is not None and kwargs.get("job_id"):
            partition, region = where
            kwargs.setdefault("region_name", region)
            kwargs.setdefault("aws_domain", self.get_aws_domain(partition))
            kwargs["job_id"] = quote(str(kwargs["job_id"]), safe="")
        return str(super().format_link(**kwargs))


class QuotaShareLink(BaseOperatorLink):
    """The task's quota share on the quota page of this Airflow's UI."""

    @property
    def name(self) -> str:
        return "Quota share"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        job_queue = getattr(operator, "job_queue", None)
        share = getattr(operator, "quota_share_name", None)
        if not job_queue or not share:
            return ""
        return quota_share_url(str(job_queue), str(share))


def quota_share_url(job_queue: str, quota_share_name: str, base_url: str | None = None) -> str:
    """``/quota/shares/<job_queue>/<share>`` under the Airflow base URL (``[api] base_url``)."""
    base = (
        base_url if base_url is not None else conf.get("api", "base_url", fallback="http://localhost:8080/")
    )
    return (
        f"{str(base).rstrip('/')}/quota/shares/{quote(job_queue, safe='')}/{quote(quota_share_name, safe='')}"
    )
