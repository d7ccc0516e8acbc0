"""The ``airflow quota ...`` command group: definitions in ``definition``, one module per command."""
