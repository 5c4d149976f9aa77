"""One-question measurements outside the workload harness: ``python -m loadtest.benches.<name>``.

Three time pure domain code in this process, no server and no engine (``summary_accuracy``,
``summary_codec``, ``templates_parse``); the others measure against real engines or servers:
``cassandra_fanout`` writes to Cassandra through Loom's session, ``announcement_probe``
starts two ``loom serve`` processes on Cassandra, ``iterator_round_trips`` runs a server in
this process on PostgreSQL, SQS and DynamoDB, and ``templates_ab`` runs the templates
workload from two git trees.
"""

__all__: list[str] = []
