"""The quota ledger: provider-owned tables in the Airflow metadata DB, their migrations and their queries.

``models`` holds the tables and ``db`` the ``BaseDBManager`` that ``airflow db migrate`` runs. The rest
translate between the rows and the engine, one job each:

- ``configuration``: apply a quota file (job queues, quota shares, revisions) and read it back as applied;
- ``queue_state``: read a job queue as the engine sees it (``QueueState``);
- ``lifecycle``: record a job's submission, its hand-over to a retry and each event after its grant;
- ``decisions``: record an allocation cycle's grants and preemptions;
- ``job_rows``: a job's row to the engine's ``Job`` and back; ``audit``: the audit log's writer;
- ``views``: read models for people (usage, positions, pages of jobs and events); ``errors``: refusals.

Every writer works in the session it is given and nothing else: it never commits, opens a session or reads
the clock (``now`` is passed in, a timezone-aware datetime), so the allocator can run a whole cycle in one
transaction. The engine decides; the ledger only writes down what it decided. Only server-side processes
(the scheduler, the api-server, CLI commands) may import the ledger: Airflow 3 blocks the ORM in task and
trigger code.
"""
