"""The I/O edge: everything that knows how streamworker talks to Redis.

* :mod:`.redisio`: clients by URL (``redis://``, ``rediss://``, ``unix://``, ``engine://``),
  reply decoding, Lua scripts by EVALSHA, URL redaction;
* :mod:`.keys`: every Redis key name the toolkit uses (hash-tagged);
* :mod:`.replicawait`: ``wait_replicas``, WAIT/WAITAOF after a write that others rely on.

Nothing here imports the core or anything above it.
"""
