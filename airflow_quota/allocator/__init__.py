"""The allocator: allocation cycles over the deferred admission requests (``cycle``), and their hosts."""

from airflow_quota.get_provider_info import QUOTA_CONFIG


def default_setting(key: str) -> float:
    """``[quota] <key>``'s default, as the provider info declares it (what Airflow's configuration gives
    when airflow.cfg and the environment leave it unset)."""
    return float(QUOTA_CONFIG["options"][key]["default"])


#: Seconds between a host's cycle starts by default (``host``). Here, free of Airflow imports, for the
#: benchmarks that start Airflow with it.
DEFAULT_ALLOCATION_INTERVAL = default_setting("allocation_interval")
