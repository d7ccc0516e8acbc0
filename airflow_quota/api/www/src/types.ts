// The REST API's shapes the page reads (airflow_quota/api/schemas.py; AWS Batch's names and nesting).

export type TaskInstanceLink = {
  dagId: string;
  runId: string;
  taskId: string;
  mapIndex: number;
  tryNumber: number;
  path: string;
};

export type PreemptionSummary = {
  beingPreemptedBy?: string | null;
  lastPreemptedAt?: string | null;
  lastPreemptedBy?: string | null;
  lastPreemptionRule?: string | null;
  preemptedAttemptCount: number;
  recentPreemptedAttempts: {
    preemptedBy?: string | null;
    stoppedAt?: string | null;
    startedAt?: string | null;
    statusReason?: string | null;
    serviceResourceId?: { value?: string | null } | null;
    lostUnitSeconds?: number | null;
  }[];
};

export type TrainingJob = { backend?: string; name: string; consoleUrl?: string | null };

/** A job; `displayName` is the REST API's own name for it, where the API gives one. */
export type Job = {
  jobId: string;
  jobName: string;
  displayName?: string | null;
  runLabel?: string | null;
  jobQueueName: string;
  quotaShareName: string;
  status: string;
  statusReason: string;
  schedulingPriority: number;
  capacityUnit: string;
  instanceCount: number;
  position: number | null;
  submittedAt: string;
  stoppedAt: string | null;
  lease: { instanceCount: number; borrowed: number; devices?: number[] | null };
  preemptionSummary: PreemptionSummary;
  taskInstance: TaskInstanceLink;
  trainingJob: TrainingJob | null;
};

export type JobList = { jobs: Job[]; total: number | null; limit: number; offset: number };

export type AuditEvent = {
  id: number;
  at: string;
  jobQueueName: string;
  kind: string;
  quotaShareName: string | null;
  jobId: string | null;
  relatedJobId: string | null;
  rule: string | null;
  message: string;
  details?: Record<string, unknown> | null;
};

export type JobQueue = {
  jobQueueName: string;
  revision: number;
  scheduler: "AIRFLOW" | "AWS_BATCH";
  quotaShareNames: string[];
  capacityLimits: { capacityUnit: string; maxCapacity: number }[];
};

export type ShareUsage = {
  capacityUnit: string;
  limit: number;
  ceiling: number;
  used: number;
  own: number;
  borrowed: number;
  lent: number;
  idle: number;
  running: number;
  runnable: number;
};

export type QuotaShare = {
  quotaShareName: string;
  jobQueueName: string;
  scheduler: string;
  state: string;
  capacityLimits: { capacityUnit: string; maxCapacity: number }[];
  capacityUsage: { capacityUnit: string; quantity: number }[];
  resourceSharingConfiguration: { strategy: string; borrowLimit?: number | null };
  preemptionConfiguration: { inSharePreemption: string };
  usage: ShareUsage[];
  error?: string | null;
};

export type Lending = { quotaShareName: string | null; units: number };

export type SnapshotShare = {
  quotaShareName: string;
  limit: number;
  own: number;
  used: number;
  borrowed: number;
  lent: number;
  idle: number;
  stopping: number;
  borrowedFrom: Lending[];
  lentTo: Lending[];
};

export type SnapshotUnit = {
  capacityUnit: string;
  capacity: number;
  quotaShares: SnapshotShare[];
  unowned: number;
  unownedIdle: number;
  unownedLentTo: Lending[];
  overdraft: number;
  stopping: number;
  free: number;
};

export type ShareLostWork = { quotaShareName: string; lostUnitSeconds: number; preemptions: number; unmeasured: number };

export type LostWork = {
  since: string | null;
  until: string;
  units: { capacityUnit: string; lostUnitSeconds: number; preemptions: number; unmeasured: number; quotaShares: ShareLostWork[] }[];
};

export type Snapshot = {
  capacity: SnapshotUnit[];
  lostWork?: LostWork | null;
  error?: string | null;
  queueUtilization: {
    quotaShareUtilization: {
      topCapacityUtilization: {
        quotaShareName: string;
        capacityUsage: { capacityUnit: string; quantity: number }[];
      }[];
    };
  };
  frontOfQuotaShares: { quotaShares: Record<string, { jobArn: string; position: number }[]> };
};

export type TimelineBar = {
  jobId: string;
  quotaShareName: string;
  schedulingPriority: number;
  capacityUnit: string;
  row: number;
  device?: number | null;
  borrowed: boolean;
  attempt: number | null;
  phase: "RUNNING" | "STOPPING";
  startedAt: string;
  endedAt: string | null;
  endedBy: string | null;
  preemptedBy: string | null;
  rule: string | null;
  reason: string;
  lostUnitSeconds?: number | null;
  lostSince?: string | null;
};

export type TimelineWait = { startedAt: string; endedAt: string | null; reason: string };

export type TimelineJob = {
  jobId: string;
  jobName: string;
  displayName?: string | null;
  runLabel?: string | null;
  quotaShareName: string;
  schedulingPriority: number;
  capacityUnit: string;
  instanceCount: number;
  status: string;
  statusReason: string;
  taskInstance: TaskInstanceLink;
  waits: TimelineWait[];
};

export type TimelineUnit = {
  capacityUnit: string;
  capacity: number;
  rows: number;
  devices: boolean;
  bars: TimelineBar[];
};

export type Timeline = {
  jobQueueName: string;
  since: string | null;
  until: string;
  firstSubmittedAt: string | null;
  quotaShareNames: string[];
  units: TimelineUnit[];
  jobs: TimelineJob[];
  truncated: boolean;
  jobLimit: number;
};

export type ServiceJob = {
  jobId: string;
  jobArn: string;
  jobName: string;
  jobQueueName: string;
  quotaShareName: string | null;
  status: string;
  statusReason?: string | null;
  schedulingPriority?: number | null;
  createdAt?: string | null;
  capacityUsage: { capacityUnit: string; quantity: number }[];
  preemptionSummary?: PreemptionSummary | null;
  trainingJob?: TrainingJob | null;
};

export type ServiceJobList = { jobs: ServiceJob[]; error?: string | null };
