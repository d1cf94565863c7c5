"""Extreme and malformed arguments for every command of the engine's table.

:data:`TEMPLATES` gives, per command, argument shapes in which ``N`` marks a numeric slot (a
count, offset, index, range bound, TTL or timeout) and ``K`` a key; :func:`expand` fills each
``N`` slot in turn with every value of :data:`EXTREMES` (the other slots keep a benign value)
and each ``K`` with a key of every type. :data:`SETUP` creates one key of each type.

Shapes are chosen so that nothing blocks on either server: blocking commands read a key that
has data, and nothing that would stall redis-server itself (CLIENT PAUSE, DEBUG SLEEP, a huge
negative SRANDMEMBER count, which Redis answers with that many elements) is sent to it.
"""

from __future__ import annotations

from collections.abc import Iterator

# The int64 and int32 extremes, 2^64, and what is not a number.
EXTREMES: tuple[bytes, ...] = (
    b"0",
    b"1",
    b"-1",
    b"2147483647",
    b"2147483648",
    b"-2147483648",
    b"-2147483649",
    b"4294967296",
    b"9223372036854775807",
    b"-9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"4611686018427387904",
    b"",
    b"abc",
    b"1.5",
    b"-0",
    b"+1",
    b" 1",
    b"01",
    b"1e3",
    b"inf",
    b"-inf",
    b"nan",
)
# Counts that redis-server answers with that many elements (SRANDMEMBER's repeats): the engine
# refuses these past its reply bound instead, so they are compared separately.
REPEATING_COUNTS: frozenset[bytes] = frozenset(
    {
        b"-2147483648",
        b"-2147483649",
        b"-9223372036854775807",
    }
)

# Bit offsets that make SETBIT / BITFIELD SET grow a string to 256 MB on both servers: driven
# by test_bits.py's allocation test instead, so that the table run stays small.
ALLOCATING_OFFSETS: frozenset[bytes] = frozenset({b"2147483647", b"2147483648"})
ALLOCATING_COMMANDS: frozenset[bytes] = frozenset({b"setbit", b"bitfield"})

# Commands whose negative count means "this many, repeats allowed" (compared without those).
REPEATING_COMMANDS: frozenset[bytes] = frozenset({b"srandmember", b"zrandmember", b"hrandfield"})

KEYS: tuple[bytes, ...] = (b"str", b"int", b"list", b"set", b"hash", b"zset", b"stream", b"none")

SETUP: tuple[tuple[bytes, ...], ...] = (
    (b"SET", b"str", b"hello world"),
    (b"SET", b"int", b"42"),
    (b"RPUSH", b"list", b"a", b"b", b"c", b"b", b"a"),
    (b"SADD", b"set", b"a", b"b", b"c"),
    (b"HSET", b"hash", b"f1", b"1", b"f2", b"v2"),
    (b"ZADD", b"zset", b"1", b"a", b"2", b"b", b"3", b"c"),
    (b"XADD", b"stream", b"1-1", b"f", b"v"),
    (b"XADD", b"stream", b"2-1", b"f", b"v"),
    (b"XGROUP", b"CREATE", b"stream", b"g", b"0"),
    (b"XREADGROUP", b"GROUP", b"g", b"c", b"STREAMS", b"stream", b">"),
    (
        b"FUNCTION",
        b"LOAD",
        b"REPLACE",
        b"#!lua name=ext\n"
        b"redis.register_function('echo', function(k, a) return {#k, #a} end)\n"
        b"redis.register_function{function_name='ro', callback=function(k, a) return #k end,"
        b" flags={'no-writes'}}",
    ),
)

# Shapes per command (argv after the name). ``N`` is a numeric slot, ``K`` a key slot.
TEMPLATES: dict[str, tuple[str, ...]] = {
    "append": ("K x",),
    "bitcount": ("K N -1", "K 0 N", "K N N BIT", "str N -1 BIT", "str 0 N BYTE"),
    "bitfield": (
        "K GET u8 N",
        "K GET i64 N",
        "K SET u8 N 1",
        "K SET i8 0 N",
        "K INCRBY u63 0 N",
        "K OVERFLOW SAT INCRBY i64 0 N",
        "K OVERFLOW FAIL SET u8 0 N",
        "str OVERFLOW WRAP SET i64 #1 N GET i64 #1",
    ),
    "bitfield_ro": ("K GET u8 N", "K GET i64 N", "K GET u63 N GET i8 #1"),
    "bitop": ("AND dest K str", "NOT dest K", "XOR K str int", "N dest str"),
    "bitpos": ("K N", "K 1 N", "K 0 0 N", "str 1 N -1 BIT", "str 0 0 N BIT", "str 0 N N BYTE"),
    "bzmpop": ("N 1 zset MIN", "1 N zset MAX", "1 1 zset MIN COUNT N", "0 2 K zset MAX"),
    "bzpopmax": ("zset N",),
    "bzpopmin": ("zset N", "K zset N"),
    "blmpop": ("N 1 list LEFT", "1 N list LEFT", "1 1 list RIGHT COUNT N", "0 2 K list LEFT"),
    "blpop": ("list N",),
    "brpop": ("list N",),
    "dbsize": ("",),
    "decr": ("K",),
    "decrby": ("K N", "int N"),
    "copy": ("K copied DB N", "K copied DB N REPLACE", "K K"),
    # DUMP of the keys whose bytes are deterministic on redis-server (its hashtable sets and
    # the stream's delivery times are not); RESTORE's option and check order.
    "dump": ("str", "int", "list", "hash", "zset", "none"),
    "restore": (
        "K N junk",
        "fresh N junk",
        "fresh 0 junk IDLETIME N",
        "fresh 0 junk FREQ N",
        "K 0 junk REPLACE FREQ N",
        "fresh 0 junk IDLETIME 1 FREQ N",
    ),
    "del": ("K",),
    "echo": ("N",),
    "exists": ("K",),
    "expire": ("K N", "K N NX", "K N GT", "str N XX"),
    "expireat": ("K N", "str N LT"),
    "expiretime": ("K",),
    "get": ("K",),
    "getbit": ("K N",),
    "getdel": ("K",),
    "getex": ("K EX N", "K PX N", "K EXAT N", "K PXAT N", "K PERSIST"),
    "getrange": ("K N 10", "K 0 N", "str N N"),
    "getset": ("K N",),
    "lcs": ("K str", "str K LEN", "K int IDX MINMATCHLEN N WITHMATCHLEN", "str int MINMATCHLEN N"),
    "substr": ("K N 10", "K 0 N", "str N N"),
    "move": ("K N", "str N", "K 1"),
    "hdel": ("K f1",),
    "hexists": ("K f1",),
    "hget": ("K f1",),
    "hgetall": ("K",),
    "hincrby": ("K f1 N", "hash f2 N"),
    "hincrbyfloat": ("K f1 N",),
    "hkeys": ("K",),
    "hlen": ("K",),
    "hmget": ("K f1 f2",),
    "hmset": ("K f N",),
    "hset": ("K f N",),
    "hrandfield": ("K N", "K N WITHVALUES", "K"),
    "hscan": ("K N", "K 0 COUNT N", "K N MATCH f* COUNT N"),
    "hsetnx": ("K f N",),
    "hstrlen": ("K f1",),
    "hvals": ("K",),
    "incr": ("K",),
    "incrby": ("K N", "int N"),
    "incrbyfloat": ("K N", "int N"),
    "lrem": ("K N a", "list N b"),
    "lmove": ("K list LEFT RIGHT", "list K RIGHT LEFT", "list list N LEFT"),
    "rpoplpush": ("K list", "list K"),
    "blmove": ("list K LEFT RIGHT N", "list K N RIGHT 0"),
    "brpoplpush": ("list K N",),
    "smove": ("K set a", "set K a"),
    "sinterstore": ("dst K set",),
    "sunionstore": ("dst K set",),
    "sdiffstore": ("dst K set",),
    "zunion": ("N K zset", "2 K zset WEIGHTS N 1", "2 K set AGGREGATE MIN WITHSCORES"),
    "zinter": ("N K zset", "2 zset K WEIGHTS 1 N", "2 K set AGGREGATE MAX WITHSCORES"),
    "zdiff": ("N K zset", "2 zset K WITHSCORES"),
    "zunionstore": ("dst N K zset", "dst 2 K zset WEIGHTS 1 N"),
    "zinterstore": ("dst N K zset", "dst 2 zset K WEIGHTS N N AGGREGATE SUM"),
    "zdiffstore": ("dst N K zset", "K 1 zset"),
    "lindex": ("K N",),
    "linsert": ("K BEFORE a N", "K AFTER N x"),
    "llen": ("K",),
    "lmpop": ("N K LEFT", "1 K RIGHT COUNT N", "N list K LEFT"),
    "lpop": ("K N", "K"),
    "lpos": ("K a RANK N", "K a COUNT N", "K a MAXLEN N", "list a RANK N COUNT N MAXLEN N"),
    "lpush": ("K N",),
    "lpushx": ("K N",),
    "lrange": ("K N -1", "K 0 N", "list N N"),
    "lset": ("K N x",),
    "ltrim": ("K N -1", "K 0 N"),
    "mget": ("K int",),
    "mset": ("K N",),
    "msetnx": ("K N",),
    "object": ("ENCODING K", "REFCOUNT K", "FREQ K", "HELP", "N K"),
    "persist": ("K",),
    "pexpire": ("K N", "str N GT"),
    "pexpireat": ("K N",),
    "pexpiretime": ("K",),
    "ping": ("", "N"),
    "psetex": ("K N v",),
    "pttl": ("K",),
    "rename": ("K newname",),
    "renamenx": ("K newname",),
    "rpop": ("K N", "K"),
    "rpush": ("K N",),
    "rpushx": ("K N",),
    "sadd": ("K N",),
    "scan": ("N", "0 COUNT N", "N COUNT N", "0 MATCH * COUNT N TYPE string"),
    "scard": ("K",),
    "sdiff": ("K set",),
    "sscan": ("K N", "K 0 COUNT N", "K N MATCH * COUNT N"),
    "select": ("N",),
    "set": ("K v EX N", "K v PX N", "K v EXAT N", "K v PXAT N", "K v GET EX N"),
    "setbit": ("K N 1", "K 1 N", "str N 0"),
    "setex": ("K N v",),
    "setnx": ("K N",),
    "setrange": ("K N x", "K N ''", "str N x"),
    "sinter": ("K set",),
    "sintercard": ("N K set", "2 K set LIMIT N", "1 K LIMIT N"),
    "sismember": ("K a",),
    "smembers": ("K",),
    "smismember": ("K a b",),
    "spop": ("K N", "K"),
    "sort": (
        "K LIMIT N 1 ALPHA",
        "K LIMIT 0 N ALPHA",
        "K BY nosort LIMIT N N STORE dst",
        "list BY nosort LIMIT N N",
        "list BY nosort DESC LIMIT 1 N",
        "zset BY nosort LIMIT N 1",
        "K ALPHA LIMIT N N STORE dst",
    ),
    "sort_ro": ("K LIMIT N 1 ALPHA", "list BY nosort DESC LIMIT N N", "zset BY nosort LIMIT 0 N"),
    "srandmember": ("K N", "K"),
    "srem": ("K a",),
    "strlen": ("K",),
    "sunion": ("K set",),
    "swapdb": ("N 0", "0 N"),
    "touch": ("K",),
    "ttl": ("K",),
    "type": ("K",),
    "unlink": ("K",),
    "xack": ("K g N", "K g 1-1"),
    "xadd": (
        "K MAXLEN N * f v",
        "K MAXLEN ~ N * f v",
        "K MINID ~ 0 LIMIT N * f v",
        "K MAXLEN ~ 0 LIMIT N * f v",
        "K MINID N * f v",
        "K N f v",
    ),
    "xautoclaim": ("K g c N 0", "K g c 0 0 COUNT N", "K g c 0 N"),
    "xclaim": (
        "K g c N 1-1",
        "K g c 0 1-1 IDLE N",
        "K g c 0 1-1 TIME N",
        "K g c 0 1-1 RETRYCOUNT N",
        "K g c 0 N",
    ),
    "xdel": ("K N",),
    "xlen": ("K",),
    "xpending": ("K g - + N", "K g IDLE N - + 10", "K g N + 10", "K g - + N c"),
    "xrange": ("K - + COUNT N", "K N +", "K - N"),
    "xread": ("COUNT N STREAMS K 0", "BLOCK N STREAMS stream 0", "STREAMS K N"),
    "xreadgroup": (
        "GROUP g c COUNT N STREAMS K 0",
        "GROUP g c BLOCK N STREAMS stream 0",
        "GROUP g c STREAMS K N",
    ),
    "xrevrange": ("K + - COUNT N", "K N -"),
    "xsetid": ("K N",),
    "xtrim": ("K MAXLEN N", "K MINID N", "K MAXLEN ~ N LIMIT N", "K MAXLEN ~ 0 LIMIT N"),
    "pfadd": ("K a b",),
    "pfcount": ("K", "K str"),
    "pfmerge": ("dst K",),
    "pfdebug": ("ENCODING K", "GETREG K", "DECODE K", "TODENSE K", "N K"),
    "geoadd": ("K N 1 m", "K 1 N m", "K NX CH N 1 m"),
    "geopos": ("K a b",),
    "geodist": ("K a b km",),
    "geohash": ("K a",),
    "georadius": (
        "K N 1 1 km",
        "K 1 N 1 km",
        "K 1 1 N km",
        "K 1 1 100 km COUNT N",
        "K 1 1 100 km COUNT N ANY ASC",
        "K 1 1 100 km STORE dst COUNT N",
    ),
    "georadius_ro": ("K 1 1 N km", "K 1 1 100 km COUNT N"),
    "georadiusbymember": (
        "K a N km",
        "K a 100 km COUNT N",
        "K a 100 km STOREDIST dst COUNT N",
    ),
    "georadiusbymember_ro": ("K a N km", "K a 100 km COUNT N DESC"),
    "geosearch": (
        "K FROMLONLAT N 1 BYRADIUS 1 km",
        "K FROMLONLAT 1 N BYRADIUS 1 km",
        "K FROMMEMBER a BYBOX N 1 km",
        "K FROMMEMBER a BYBOX 1 N km",
        "K FROMMEMBER a BYRADIUS N m COUNT 1",
        "K FROMLONLAT 0 0 BYRADIUS 100 km COUNT N ANY",
    ),
    "geosearchstore": (
        "dst K FROMLONLAT 1 N BYRADIUS 1 km",
        "dst K FROMMEMBER a BYBOX N N km STOREDIST",
        "dst K FROMMEMBER a BYRADIUS 100 km COUNT N STOREDIST",
    ),
    "zadd": ("K N m", "K INCR N m", "K GT N a"),
    "zcard": ("K",),
    "zcount": ("K N +inf", "K -inf N"),
    "zincrby": ("K N a",),
    "zintercard": ("N K zset", "2 K zset LIMIT N", "1 K LIMIT N"),
    "zmpop": ("N K MIN", "1 K MAX COUNT N", "N zset K MIN"),
    "zlexcount": ("K - +",),
    "zmscore": ("K a b",),
    "zpopmax": ("K N", "K"),
    "zpopmin": ("K N", "K"),
    "zrange": (
        "K N -1",
        "K 0 N",
        "K -inf +inf BYSCORE LIMIT N 1",
        "K -inf +inf BYSCORE LIMIT 0 N",
        "K - + BYLEX LIMIT N N",
        "K N N BYSCORE",
    ),
    "zrangestore": (
        "dst K N -1",
        "dst K 0 N",
        "dst K -inf +inf BYSCORE LIMIT N 1",
        "dst K -inf +inf BYSCORE LIMIT 0 N",
        "K zset 0 N",
    ),
    "zrangebylex": ("K - + LIMIT N 1", "K - + LIMIT 0 N"),
    "zrangebyscore": ("K -inf +inf LIMIT N 1", "K -inf +inf LIMIT 0 N", "K N N"),
    "zrandmember": ("K N", "K N WITHSCORES", "K"),
    "zrank": ("K a",),
    "zrem": ("K a",),
    "zremrangebylex": ("K - +",),
    "zremrangebyrank": ("K N -1", "K 0 N"),
    "zremrangebyscore": ("K N N",),
    "zrevrange": ("K N -1", "K 0 N"),
    "zrevrangebylex": ("K + - LIMIT N 1", "K + - LIMIT 0 N"),
    "zrevrangebyscore": ("K +inf -inf LIMIT N N", "K N N"),
    "zrevrank": ("K a",),
    "zscan": ("K N", "K 0 COUNT N", "K N MATCH [ab] COUNT N"),
    "zscore": ("K a",),
    "eval": ("'return 1' N", "'return 1' N K"),
    "eval_ro": ("'return 1' N",),
    "evalsha": ("0000000000000000000000000000000000000000 N",),
    "evalsha_ro": ("0000000000000000000000000000000000000000 N",),
    "fcall": ("echo N", "echo N K", "nofunc N"),
    "fcall_ro": ("ro N", "ro N K", "echo N"),
    "command": ("GETKEYS GET N", "INFO N"),
    "config": ("GET N",),
    "memory": ("USAGE none SAMPLES N", "USAGE str SAMPLES N", "N"),
    "latency": ("HISTORY N", "GRAPH N", "RESET N", "HISTOGRAM N", "N"),
    "xgroup": (
        "CREATE K g2 N",
        "CREATE K g2 0 ENTRIESREAD N",
        "SETID K g N",
        "SETID K g 0 ENTRIESREAD N",
        "DESTROY K N",
        "DELCONSUMER K g N",
    ),
    "xinfo": ("STREAM K FULL COUNT N", "GROUPS K", "CONSUMERS K N"),
    # Channel names are strings: the extremes go where a client could put anything.
    "publish": ("N x", "K N"),
    "spublish": ("N x", "K N"),
    # One channel each: several answer one frame per channel, this harness reads one reply.
    "unsubscribe": ("N",),
    "punsubscribe": ("N",),
    "sunsubscribe": ("N",),
    "pubsub": (
        "CHANNELS N",
        "CHANNELS N N",
        "NUMSUB N",
        "NUMSUB N N",
        "SHARDCHANNELS N",
        "SHARDNUMSUB N",
        "NUMPAT N",
        "HELP N",
    ),
    "client": (
        "UNBLOCK N",
        "UNBLOCK N TIMEOUT",
        "NO-EVICT N",
        "GETNAME",
        "TRACKINGINFO",
        "GETREDIR",
    ),
    "acl": (
        "CAT",
        "WHOAMI",
        "USERS",
        "LIST",
        "GETUSER default",
        "GETUSER K",
        "GENPASS abc",
        "LOG N",
        "DRYRUN default GET K",
        "DRYRUN default LRANGE K N N",
        "DELUSER K",
    ),
    "role": ("",),
    "failover": ("", "TIMEOUT N", "TO 127.0.0.1 N", "TO 127.0.0.1 N FORCE TIMEOUT N", "ABORT"),
    "readonly": ("",),
    "readwrite": ("",),
    "asking": ("",),
    "cluster": ("INFO", "KEYSLOT K", "COUNTKEYSINSLOT N", "GETKEYSINSLOT N N", "SETSLOT N"),
    "module": ("LIST", "UNLOAD K", "LOAD K"),
    "lolwut": ("", "VERSION N"),
}

# Commands of the table not driven here, and why.
SKIPPED: dict[str, str] = {
    "auth": "connection state",
    "hello": "connection state (protocol switch)",
    "quit": "closes the connection",
    "reset": "connection state",
    "multi": "transactions have their own tests",
    "exec": "transactions have their own tests",
    "discard": "transactions have their own tests",
    "watch": "transactions have their own tests",
    "unwatch": "transactions have their own tests",
    "flushall": "would empty the fixture keys",
    "flushdb": "would empty the fixture keys",
    "bgrewriteaof": "persistence",
    "save": "persistence (writes the server's dump.rdb; tests/engine/test_rdb_files.py)",
    "bgsave": "persistence (writes the server's dump.rdb; tests/engine/test_rdb_files.py)",
    "debug": "DEBUG can stop or crash redis-server",
    "script": "script cache, no numeric argument",
    "function": "libraries, no numeric argument (tests/engine/test_functions.py)",
    "keys": "no numeric argument",
    "info": "the reply is the server's state (INFO errorstats has its own test)",
    "time": "the reply is the clock",
    "lastsave": "the reply is the clock",
    "randomkey": "the reply is chance's",
    # A subscription turns the connection into a message stream (RESP2 then refuses every
    # other command) and needs a transport that delivers messages, which this harness's
    # direct engine calls lack; tests/engine/test_pubsub.py drives them over sockets, with
    # extreme and binary channel names.
    "subscribe": "subscribed mode (a message stream), covered by test_pubsub.py",
    "psubscribe": "subscribed mode (a message stream), covered by test_pubsub.py",
    "ssubscribe": "subscribed mode (a message stream), covered by test_pubsub.py",
    "pfselftest": "no argument; runs for seconds on redis-server (test_hyperloglog.py runs it)",
    # Administration commands that would change the session's redis-server for good, or hang
    # it; tests/engine/test_client_admin.py covers their extremes against a server of its own.
    "shutdown": "would stop redis-server",
    "monitor": "turns the connection into a MONITOR stream",
    "wait": "WAIT 1 0 blocks redis-server's connection forever",
    "replicaof": "REPLICAOF host port would make redis-server a replica",
    "slaveof": "SLAVEOF host port would make redis-server a replica",
    "sync": "turns the connection into a replication stream",
    "psync": "turns the connection into a replication stream",
    "replconf": "REPLCONF ACK gets no reply at all (tests/engine/test_replication_stream.py)",
    "migrate": "MIGRATE of an existing key connects redis-server to another server",
    "slowlog": "the reply is the server's own timings (tests/engine/test_slowlog_latency.py)",
}


def _words(shape: str) -> list[bytes]:
    import shlex

    return [w.encode() for w in shlex.split(shape)]


def expand(name: str) -> Iterator[list[bytes]]:
    """Every argv (name included) for ``name``: each ``N`` slot takes every extreme value in
    turn (the other ``N`` slots hold ``1``), each shape with a ``K`` slot runs on every key."""
    for shape in TEMPLATES[name]:
        words = _words(shape)
        slots = [i for i, w in enumerate(words) if w == b"N"]
        keys = KEYS if b"K" in words else (b"",)
        for key in keys:
            base = [key if w == b"K" else w for w in words]
            if not slots:
                yield [name.encode(), *base]
                continue
            for slot in slots:
                for value in EXTREMES:
                    argv = [b"1" if w == b"N" else w for w in base]
                    argv[slot] = value
                    yield [name.encode(), *argv]
    # Wrong arity: no arguments at all, and one too many on the first shape.
    yield [name.encode()]
