"""The quota ledger: provider-owned tables in the Airflow metadata DB, their migrations and their queries.

``models`` holds the tables, ``db`` the ``BaseDBManager`` that ``airflow db migrate`` runs, and ``store``
the translation between the rows and the engine's ``QueueState``. Only server-side processes (the
scheduler, the api-server, CLI commands) may import the ledger: Airflow 3 blocks the ORM in task and
trigger code.
"""
