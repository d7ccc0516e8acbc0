"""airflow-quota: AWS Batch-style GPU quota management for Apache Airflow."""

__version__ = "0.3.0"
