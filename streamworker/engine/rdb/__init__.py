"""Redis 7.0's RDB format (version 10): the value codec behind DUMP/RESTORE, and RDB files
(SAVE/BGSAVE, ``engine serve --load-rdb``). Pure Python; see :mod:`.codec` for what is
byte-identical to redis-server and why the rest cannot be."""

from __future__ import annotations
