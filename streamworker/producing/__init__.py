"""Publishing: :mod:`.producer` (``Producer``, ``SyncProducer``, publish-once) and
:mod:`.partitions` (key-hashed partitioned streams). Above the core, below the strategies (the
outbox relay in :mod:`streamworker.idempotency.sql.outbox` publishes through it).
"""
