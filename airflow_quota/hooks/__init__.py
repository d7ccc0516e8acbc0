"""Hooks of airflow-quota (in the amazon provider's style: ``AwsBaseHook`` subclasses)."""
