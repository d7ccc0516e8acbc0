"""The Airflow plugin: the quota REST API and the "GPU Quotas" page, served by the api-server."""
