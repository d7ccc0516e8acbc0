"""airflow-quota: AWS Batch-style GPU quota management for Apache Airflow."""

__version__ = "0.2.0"
