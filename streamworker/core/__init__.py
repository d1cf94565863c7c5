"""The core: what a handler sees and returns, free of Redis and of any database.

* :mod:`.message`: :class:`~streamworker.core.message.Message`, one delivered entry;
* :mod:`.codec`: field maps to typed bodies and back;
* :mod:`.outcomes`: what became of one handler call (ack, retry, dead letter);
* :mod:`.deps`: ``Depends`` and the resolver of handler parameters;
* :mod:`.effects`: ``Effects``, the Redis writes a Lua-strategy handler returns.

The public names are re-exported by :mod:`streamworker`.
"""
