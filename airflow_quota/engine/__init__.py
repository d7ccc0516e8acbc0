"""The quota engine: pure policy over plain dataclasses, with no I/O and no Airflow import.

``plan_cycle`` decides grants, preemptions and promises for one job queue; ``lifecycle`` applies the events
that happen between cycles. The allocator, the simulator and the benchmarks all drive these.
"""

from airflow_quota.engine.lifecycle import (
    LifecycleError,
    complete_stop,
    finish_job,
    set_status,
    submit_job,
    terminate_job,
    update_priority,
    update_queue,
)
from airflow_quota.engine.model import (
    CyclePlan,
    Decision,
    Grant,
    Job,
    JobQueue,
    JobRequest,
    JobStatus,
    Preemption,
    PreemptionRule,
    Promise,
    QueueState,
    QuotaShare,
    ShareState,
    SharingStrategy,
    StopCause,
    decided_job,
)
from airflow_quota.engine.planner import plan_cycle

__all__ = [
    "CyclePlan",
    "Decision",
    "Grant",
    "Job",
    "JobQueue",
    "JobRequest",
    "JobStatus",
    "LifecycleError",
    "Preemption",
    "PreemptionRule",
    "Promise",
    "QueueState",
    "QuotaShare",
    "ShareState",
    "SharingStrategy",
    "StopCause",
    "complete_stop",
    "decided_job",
    "finish_job",
    "plan_cycle",
    "set_status",
    "submit_job",
    "terminate_job",
    "update_priority",
    "update_queue",
]
