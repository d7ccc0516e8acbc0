"""The allocator: allocation cycles over the deferred admission requests (``cycle``), and their hosts."""

#: ``[quota] allocation_interval``'s default: seconds between a host's cycle starts (``host``). Kept here,
#: free of Airflow imports, for the benchmarks that start Airflow with it.
DEFAULT_ALLOCATION_INTERVAL = 0.25
