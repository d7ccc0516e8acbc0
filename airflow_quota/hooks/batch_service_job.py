"""AWS Batch service jobs through an Airflow AWS connection: ``BatchServiceJobHook``.

In the amazon provider's style (``BatchClientHook``): an ``AwsBaseHook`` whose ``conn`` is the boto3
``batch`` client of the connection, with the connection's (or the given) ``region_name``, ``verify`` and
``config`` (a botocore ``Config`` or its dict: timeouts, retries). The operator's AWS Batch strategy
(``operators/batch_backend.py``) and the monitoring trigger (``triggers/batch_service_job.py``) both go
through it, so whatever the task was given reaches every call, in the worker and in the triggerer.
Reading its answers needs no client: the final statuses, the client-token tag and a DescribeServiceJob
answer's attempts are in ``aws_batch/service_jobs.py``, so that importing the operator imports no boto3.

What AWS Batch's model and documentation say, and what the hook does about it:

- **Every List call pages.** ListServiceJobs answers at most 100 jobs and a ``nextToken``;
  ``list_service_jobs`` follows it to the end (``service_jobs_named`` too).
- **A ``JOB_NAME`` filter ignores ``jobStatus``** (botocore's model of ListServiceJobs: only
  ``SHARE_IDENTIFIER`` and ``QUOTA_SHARE_NAME`` combine with it), and matches case-insensitively, with a
  trailing ``*`` as a wildcard. So ``service_jobs_named`` sends the filter alone and keeps, client-side,
  the jobs of exactly that name and of the statuses asked.
- **A repeated ``clientToken`` "is rejected"** (the model of SubmitServiceJob). ``submit`` then looks for
  the job the token submitted (its ``airflow-quota:client-token`` tag, among the jobs of its name), for up
  to ``FIND_SUBMITTED_TIMEOUT`` seconds: a List answer may not show a job submitted a moment ago.
- **Throttling and server errors** that outlast botocore's own retries are retried here too (the same
  request: SubmitServiceJob's ``clientToken`` makes a repeat name the same job), ``CALL_ATTEMPTS`` times in
  all, waiting ``CALL_DELAY`` seconds doubled each time, at most ``CALL_MAX_DELAY``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, ClassVar, Final, TypeVar

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from botocore.exceptions import ClientError

from airflow_quota.aws_batch.service_jobs import CLIENT_TOKEN_TAG

#: Error codes botocore's retry handlers read as throttling (its ``_retry.json``), as AWS Batch may send them.
THROTTLING_CODES: Final = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "SlowDown",
    }
)

_T = TypeVar("_T")


def is_transient(error: Exception) -> bool:
    """Throttling, or a server error (HTTP 5xx): the same call may succeed a moment later."""
    if not isinstance(error, ClientError):
        return False
    code = str(error.response.get("Error", {}).get("Code", ""))
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return code in THROTTLING_CODES or status >= 500


def list_service_jobs(client: Any, job_queue: str, **query: Any) -> Iterator[dict[str, Any]]:
    """Every job ListServiceJobs lists for ``job_queue`` and ``query`` (``jobStatus``, ``filters``,
    ``maxResults``), every page (``nextToken``)."""
    request: dict[str, Any] = {"jobQueue": job_queue, **query}
    filters = request.get("filters") or []
    if request.get("jobStatus") and any(each.get("name") == "JOB_NAME" for each in filters):
        raise ValueError(
            "ListServiceJobs ignores jobStatus beside a JOB_NAME filter (botocore's model): filter the "
            "statuses client-side"
        )
    while True:
        answer = client.list_service_jobs(**request)
        yield from answer.get("jobSummaryList") or []
        token = answer.get("nextToken")
        if not token:
            return
        request["nextToken"] = token


def service_jobs_named(
    client: Any, job_queue: str, job_name: str, statuses: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """ListServiceJobs' summaries of the queue's jobs named exactly ``job_name`` (of ``statuses``, when
    given; else of every status), every page. The ``JOB_NAME`` filter is sent alone (it ignores
    ``jobStatus``) and matches case-insensitively with ``*`` as a wildcard: both are checked here."""
    return [
        job
        for job in list_service_jobs(client, job_queue, filters=[{"name": "JOB_NAME", "values": [job_name]}])
        if job.get("jobName") == job_name and (statuses is None or job.get("status") in statuses)
    ]


class BatchServiceJobHook(AwsBaseHook):
    """Interact with AWS Batch service jobs (SubmitServiceJob, DescribeServiceJob, ListServiceJobs,
    UpdateServiceJob, TerminateServiceJob).

    A thin wrapper around ``boto3.client("batch")`` (``conn``). Additional arguments (``aws_conn_id``,
    ``region_name``, ``verify``, ``config``) are passed down to the underlying ``AwsBaseHook``.
    """

    hook_name = "AWS Batch service jobs (airflow-quota)"

    #: How long ``submit`` looks for the job a rejected repeat of its request submitted (seconds).
    FIND_SUBMITTED_TIMEOUT: ClassVar[float] = 60.0
    #: Calls made in all for one call meeting throttling or server errors; the first wait, and the longest.
    CALL_ATTEMPTS: ClassVar[int] = 5
    CALL_DELAY: ClassVar[float] = 1.0
    CALL_MAX_DELAY: ClassVar[float] = 20.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["client_type"] = "batch"
        super().__init__(*args, **kwargs)

    @property
    def client(self) -> Any:
        """The boto3 Batch client (``conn``, built on first use: it reads the connection)."""
        return self.conn

    def _call(self, call: Callable[[], _T]) -> _T:
        """``call()``, again after throttling or a server error, up to ``CALL_ATTEMPTS`` times in all."""
        delay = self.CALL_DELAY
        for _ in range(self.CALL_ATTEMPTS - 1):
            try:
                return call()
            except ClientError as error:
                if not is_transient(error):
                    raise
                self.log.warning("AWS Batch answered %s; asking again in %.1f s", error, delay)
                time.sleep(delay)
                delay = min(delay * 2, self.CALL_MAX_DELAY)
        return call()

    def submit(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """SubmitServiceJob; returns the job's description and whether this call created it (False: the
        ``clientToken`` named a job submitted before, which is re-attached to, whether AWS answered that
        job or rejected the repeat)."""
        job_name, job_queue = str(request["jobName"]), str(request["jobQueue"])
        known = {job["jobId"] for job in self._call(lambda: self.jobs_named(job_queue, job_name))}
        try:
            answer = self._call(lambda: self.conn.submit_service_job(**request))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ClientException":
                raise
            submitted = self._job_of_token(request)
            if submitted is None:
                raise
            return submitted, False
        return self.describe(str(answer["jobId"])), answer["jobId"] not in known

    def _job_of_token(self, request: Mapping[str, Any]) -> dict[str, Any] | None:
        """The description of the job an earlier SubmitServiceJob with this request's ``clientToken``
        created (its ``CLIENT_TOKEN_TAG``), looked for among the jobs of its name, for up to
        ``FIND_SUBMITTED_TIMEOUT`` seconds (ListServiceJobs may lag a submission); None when none is."""
        token = request.get("clientToken")
        if not token:
            return None
        job_name, job_queue = str(request["jobName"]), str(request["jobQueue"])
        deadline = time.monotonic() + self.FIND_SUBMITTED_TIMEOUT
        delay = min(self.CALL_DELAY, self.FIND_SUBMITTED_TIMEOUT)
        while True:
            for summary in self._call(lambda: self.jobs_named(job_queue, job_name)):
                described = self.describe(str(summary["jobId"]))
                if (described.get("tags") or {}).get(CLIENT_TOKEN_TAG) == token:
                    return described
            if time.monotonic() + delay > deadline:
                return None
            self.log.info("No job of clientToken %s listed yet; asking again in %.1f s", token, delay)
            time.sleep(delay)
            delay = min(delay * 2, self.CALL_MAX_DELAY)

    def describe(self, job_id: str) -> dict[str, Any]:
        """DescribeServiceJob's answer (without ``ResponseMetadata``)."""
        answer = dict(self._call(lambda: self.conn.describe_service_job(jobId=job_id)))
        answer.pop("ResponseMetadata", None)
        return answer

    def terminate(self, job_id: str, reason: str) -> None:
        """TerminateServiceJob (a job already ended is left as it is)."""
        self._call(lambda: self.conn.terminate_service_job(jobId=job_id, reason=reason))

    def update_priority(self, job_id: str, scheduling_priority: int) -> None:
        """UpdateServiceJob's ``schedulingPriority``."""
        self._call(lambda: self.conn.update_service_job(jobId=job_id, schedulingPriority=scheduling_priority))

    def list_jobs(self, job_queue: str, **query: Any) -> list[dict[str, Any]]:
        """Every job ListServiceJobs lists for the queue and ``query``, every page."""
        return list(list_service_jobs(self.conn, job_queue, **query))

    def jobs_named(
        self, job_queue: str, job_name: str, statuses: Collection[str] | None = None
    ) -> list[dict[str, Any]]:
        """The queue's jobs named exactly ``job_name`` (of ``statuses``, or any), every page."""
        return service_jobs_named(self.conn, job_queue, job_name, statuses)
