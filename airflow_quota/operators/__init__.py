"""The operator DAG authors write: QuotaTrainingOperator."""
