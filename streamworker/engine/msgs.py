"""Every error text the engine sends, verbatim Redis 7.0.15 wire text (without the leading ``-``).

A flat module of constants and small functions, append-friendly: add new texts at the end of the
relevant section (or a new section), never change an existing text without a differential test
against redis-server 7.0.15 showing it.
"""

from __future__ import annotations

# --- generic -------------------------------------------------------------------------------

SYNTAX = "ERR syntax error"
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "ERR value is not an integer or out of range"
NOT_FLOAT = "ERR value is not a valid float"
NOT_POSITIVE = "ERR value is out of range, must be positive"
COUNT_OUT_OF_RANGE_LONG = (
    "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"
)
INT_OUT_OF_RANGE = "ERR value is out of range, value must between -2147483648 and 2147483647"
NO_SUCH_KEY = "ERR no such key"
VALUE_OUT_OF_RANGE = "ERR value is out of range"
OVERFLOW = "ERR increment or decrement would overflow"
INCR_NAN_OR_INF = "ERR increment would produce NaN or Infinity"
TIMEOUT_NOT_FLOAT = "ERR timeout is not a float or out of range"
TIMEOUT_NOT_INTEGER = "ERR timeout is not an integer or out of range"
# Redis 7.0 prints XREAD and '$' for XREADGROUP too.
XREAD_UNBALANCED = (
    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."
)
TIMEOUT_NEGATIVE = "ERR timeout is negative"
TIMEOUT_OUT_OF_RANGE = "ERR timeout is out of range"


def internal_error(cmd: str) -> str:
    """The reply to a command that hit an engine bug (the details are in the server log)."""
    return f"ERR engine internal error in '{cmd}' (details in the server log)"


def wrong_arity(cmd: str) -> str:
    """``ERR wrong number of arguments for 'get' command`` (``cmd`` is the lowercase full name,
    ``container|sub`` for subcommands)."""
    return f"ERR wrong number of arguments for '{cmd}' command"


def unknown_command(name: str, args_text: str) -> str:
    """``args_text`` is the quoted args list as Redis builds it: ``'a' 'b' `` (trailing space)."""
    return f"ERR unknown command '{name}', with args beginning with: {args_text}"


def unknown_subcommand(sub: str, container_upper: str) -> str:
    """``ERR unknown subcommand 'x'. Try XGROUP HELP.``"""
    return f"ERR unknown subcommand '{sub}'. Try {container_upper} HELP."


def unknown_subcommand_or_arity(sub: str, container_upper: str) -> str:
    """The HELP-style text some containers send from inside the command (CLIENT, CONFIG...)."""
    return (
        f"ERR unknown subcommand or wrong number of arguments for '{sub}'. "
        f"Try {container_upper} HELP."
    )


# --- keys ----------------------------------------------------------------------------------


def invalid_expire(cmd: str) -> str:
    """``ERR invalid expire time in 'set' command`` (``cmd`` lowercase)."""
    return f"ERR invalid expire time in '{cmd}' command"


EXPIRE_NX_XX_GT_LT = "ERR NX and XX, GT or LT options at the same time are not compatible"
EXPIRE_GT_LT = "ERR GT and LT options at the same time are not compatible"


def unsupported_option(opt: str) -> str:
    """``ERR Unsupported option FOO`` (EXPIRE family, text as given)."""
    return f"ERR Unsupported option {opt}"


SCAN_INVALID_CURSOR = "ERR invalid cursor"
RENAME_NO_SUCH_KEY = "ERR no such key"

# --- strings -------------------------------------------------------------------------------

STRING_TOO_LONG = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
LCS_NOT_STRINGS = "ERR The specified keys must contain string values"
LCS_LEN_AND_IDX = "ERR If you want both the length and indexes, please just use IDX."
LCS_TOO_MUCH_MEMORY = "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"
VALUE_NOT_FLOAT = "ERR value is not a valid float"
DECREMENT_OVERFLOW = "ERR decrement would overflow"
OFFSET_OUT_OF_RANGE = "ERR offset is out of range"

# --- bit operations ------------------------------------------------------------------------

BIT_OFFSET_OUT_OF_RANGE = "ERR bit offset is not an integer or out of range"
BIT_VALUE_OUT_OF_RANGE = "ERR bit is not an integer or out of range"
BITPOS_BIT_NOT_0_OR_1 = "ERR The bit argument must be 1 or 0."
BITOP_NOT_SINGLE_KEY = "ERR BITOP NOT must be called with a single source key."
BITFIELD_BAD_TYPE = (
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported "
    "but i64 is."
)
BITFIELD_BAD_OVERFLOW = "ERR Invalid OVERFLOW type specified"
BITFIELD_RO_GET_ONLY = "ERR BITFIELD_RO only supports the GET subcommand"

# --- lists ---------------------------------------------------------------------------------

LPOS_RANK_ZERO = (
    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use "
    "negative to start from the end of the list"
)
LPOS_COUNT_NEGATIVE = "ERR COUNT can't be negative"
LPOS_MAXLEN_NEGATIVE = "ERR MAXLEN can't be negative"
INDEX_OUT_OF_RANGE = "ERR index out of range"
NUMKEYS_NOT_POSITIVE = "ERR numkeys should be greater than 0"
MPOP_COUNT_NOT_POSITIVE = "ERR count should be greater than 0"

LIMIT_NEGATIVE = "ERR LIMIT can't be negative"
SINTERCARD_TOO_MANY_KEYS = "ERR Number of keys can't be greater than number of args"


def at_least_one_key(cmd: str) -> str:
    """ZINTERCARD & co with numkeys < 1."""
    return f"ERR at least 1 input key is needed for '{cmd}' command"


SORT_NOT_DOUBLE = "ERR One or more scores can't be converted into double"

# --- hashes --------------------------------------------------------------------------------

HASH_NOT_INTEGER = "ERR hash value is not an integer"
HASH_NOT_FLOAT = "ERR hash value is not a float"
VALUE_NAN_OR_INF = "ERR value is NaN or Infinity"

# --- sorted sets ---------------------------------------------------------------------------

ZADD_XX_NX = "ERR XX and NX options at the same time are not compatible"
ZADD_GT_LT_NX = "ERR GT, LT, and/or NX options at the same time are not compatible"
ZADD_INCR_PAIR = "ERR INCR option supports a single increment-element pair"
ZSET_NAN = "ERR resulting score is not a number (NaN)"
WEIGHT_NOT_FLOAT = "ERR weight value is not a float"
MIN_MAX_NOT_FLOAT = "ERR min or max is not a float"
MIN_MAX_NOT_STRING = "ERR min or max not valid string range item"
WITHSCORES_BYLEX = "ERR syntax error, WITHSCORES not supported in combination with BYLEX"
LIMIT_NEEDS_BY = (
    "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
)

# --- lists ---------------------------------------------------------------------------------

# --- server / connection -------------------------------------------------------------------

DB_INDEX_OUT_OF_RANGE = "ERR DB index is out of range"
NOPROTO = "NOPROTO unsupported protocol version"
PROTOCOL_VERSION_NOT_INTEGER = "ERR Protocol version is not an integer or out of range"
CLIENT_NAME_SPACES = "ERR Client names cannot contain spaces, newlines or special characters."
INVALID_CLIENT_ID = "ERR No such client"


def config_unknown_param(name: str) -> str:
    """CONFIG SET of an unsupported parameter."""
    return f"ERR Unknown option or number of arguments for CONFIG SET - '{name}'"


def config_set_failed(name: str, reason: str) -> str:
    """CONFIG SET with a bad value: ``ERR CONFIG SET failed (possibly related to argument
    'maxmemory') - argument couldn't be parsed into an integer``."""
    return f"ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}"


NOAUTH_HELLO = "WRONGPASS invalid username-password pair or user is disabled."
NOAUTH = "NOAUTH Authentication required."
OOM = "OOM command not allowed when used memory > 'maxmemory'."
NOAUTH_HELLO_FIRST = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
    "AUTH <user> <pass> option can be used to authenticate the client and select the RESP "
    "protocol version at the same time"
)
MAX_CLIENTS = "ERR max number of clients reached"
AUTH_NOT_CONFIGURED = (
    "ERR AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)

# --- transactions --------------------------------------------------------------------------

MULTI_NESTED = "ERR MULTI calls can not be nested"
EXEC_WITHOUT_MULTI = "ERR EXEC without MULTI"
DISCARD_WITHOUT_MULTI = "ERR DISCARD without MULTI"
WATCH_IN_MULTI = "ERR WATCH inside MULTI is not allowed"
EXECABORT = "EXECABORT Transaction discarded because of previous errors."
NOT_ALLOWED_IN_MULTI = "ERR Command not allowed inside a transaction"

# --- protocol ------------------------------------------------------------------------------

PROTO_INVALID_MULTIBULK_LEN = "ERR Protocol error: invalid multibulk length"
PROTO_INVALID_BULK_LEN = "ERR Protocol error: invalid bulk length"
PROTO_TOO_BIG_MBULK = "ERR Protocol error: too big mbulk count string"
PROTO_TOO_BIG_BULK = "ERR Protocol error: too big bulk count string"
PROTO_TOO_BIG_INLINE = "ERR Protocol error: too big inline request"
PROTO_UNBALANCED_QUOTES = "ERR Protocol error: unbalanced quotes in request"
PROTO_UNAUTH_MULTIBULK_LEN = "ERR Protocol error: unauthenticated multibulk length"
PROTO_UNAUTH_BULK_LEN = "ERR Protocol error: unauthenticated bulk length"


def proto_expected_dollar(got: str) -> str:
    """``ERR Protocol error: expected '$', got 'x'``."""
    return f"ERR Protocol error: expected '$', got '{got}'"


# --- blocking ------------------------------------------------------------------------------

# --- streams (owned by the stream engineer; append below) ----------------------------------

INVALID_STREAM_ID = "ERR Invalid stream ID specified as stream command argument"
XADD_ID_ZERO = "ERR The ID specified in XADD must be greater than 0-0"
XADD_ID_TOO_SMALL = (
    "ERR The ID specified in XADD is equal or smaller than the target stream top item"
)
STREAM_EXHAUSTED = "ERR The stream has exhausted the last possible ID, unable to add more items"
STREAM_ELEMENTS_TOO_LARGE = "ERR Elements are too large to be stored"
TRIM_MAXLEN_AND_MINID = (
    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
)
TRIM_MAXLEN_NEGATIVE = "ERR The MAXLEN argument must be >= 0."
TRIM_LIMIT_NEGATIVE = "ERR The LIMIT argument must be >= 0."
TRIM_LIMIT_WITHOUT_STRATEGY = (
    "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
)
TRIM_LIMIT_WITHOUT_APPROX = "ERR syntax error, LIMIT cannot be used without the special ~ option"
XTRIM_WITHOUT_STRATEGY = "ERR syntax error, XTRIM must be called with a trimming strategy"
RANGE_INVALID_START = "ERR invalid start ID for the interval"
RANGE_INVALID_END = "ERR invalid end ID for the interval"
XREAD_GROUP_OPTION = (
    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."
)
XREAD_NOACK_OPTION = (
    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."
)
XREADGROUP_MISSING_GROUP = "ERR Missing GROUP option for XREADGROUP"
XREADGROUP_DOLLAR = (
    "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history "
    "of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ "
    "ID would just return an empty result set."
)
XREAD_GREATER = (
    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> "
    "<consumer> option."
)
TIMEOUT_NOT_INTEGER = "ERR timeout is not an integer or out of range"
# Redis 7.0 prints XREAD and '$' for XREADGROUP too.
XREAD_UNBALANCED = (
    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."
)
UNBLOCKED_STREAM_DELETED = "UNBLOCKED the stream key no longer exists"
NOGROUP_BLOCKED_GROUP_DESTROYED = (
    "NOGROUP the consumer group this client was blocked on no longer exists"
)
XGROUP_KEY_REQUIRED = (
    "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want "
    "to use the MKSTREAM option to create an empty stream automatically."
)
BUSYGROUP = "BUSYGROUP Consumer Group name already exists"
ENTRIESREAD_INVALID = "ERR value for ENTRIESREAD must be positive or -1"
XCLAIM_MIN_IDLE = "ERR Invalid min-idle-time argument for XCLAIM"
XCLAIM_IDLE = "ERR Invalid IDLE option argument for XCLAIM"
XCLAIM_TIME = "ERR Invalid TIME option argument for XCLAIM"
XCLAIM_RETRYCOUNT = "ERR Invalid RETRYCOUNT option argument for XCLAIM"
XAUTOCLAIM_MIN_IDLE = "ERR Invalid min-idle-time argument for XAUTOCLAIM"
XAUTOCLAIM_COUNT = "ERR COUNT must be > 0"
XAUTOCLAIM_COUNT_TOO_HIGH = (
    "ERR Insufficient memory, failed allocating transient memory, COUNT too high."
)
XSETID_ENTRIES_ADDED_NEGATIVE = "ERR entries_added must be positive"
XSETID_BELOW_MAX_DELETED = (
    "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
)
XSETID_BELOW_TOP = "ERR The ID specified in XSETID is smaller than the target stream top item"
XSETID_ENTRIES_ADDED_BELOW_LENGTH = (
    "ERR The entries_added specified in XSETID is smaller than the target stream length"
)


def xread_block_in_script(cmd: str) -> str:
    """``cmd`` is the command name as the script wrote it."""
    return f"ERR {cmd} command is not allowed with BLOCK option from scripts"


def xreadgroup_nogroup(key: str, group: str) -> str:
    """XREADGROUP on a missing key or group."""
    return (
        f"NOGROUP No such key '{key}' or consumer group '{group}' in XREADGROUP with GROUP option"
    )


def nogroup_key_or_group(key: str, group: str) -> str:
    """XPENDING / XCLAIM / XAUTOCLAIM on a missing key or group."""
    return f"NOGROUP No such key '{key}' or consumer group '{group}'"


def nogroup_for_key(group: str, key: str) -> str:
    """XGROUP SETID/CREATECONSUMER/DELCONSUMER and XINFO CONSUMERS on a missing group."""
    return f"NOGROUP No such consumer group '{group}' for key name '{key}'"


def xclaim_unrecognized(opt: str) -> str:
    """An XCLAIM option that is neither an ID nor a known option."""
    return f"ERR Unrecognized XCLAIM option '{opt}'"


# --- scripting (EVAL, EVALSHA, SCRIPT, and what scripts see) ----------------------------------

NOSCRIPT = "NOSCRIPT No matching script. Please use EVAL."
EVAL_NUMKEYS_TOO_BIG = "ERR Number of keys can't be greater than number of args"
EVAL_NUMKEYS_NEGATIVE = "ERR Number of keys can't be negative"
NOTBUSY = "NOTBUSY No scripts in execution right now."
UNKILLABLE = (
    "UNKILLABLE Sorry the script already executed write commands against the dataset. You can "
    "either wait the script termination or kill the server in a hard way using the SHUTDOWN "
    "NOSAVE command."
)
BUSY_SCRIPT = (
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
)
BUSY_FUNCTION = (
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
)
SCRIPT_FLUSH_OPTION = "ERR SCRIPT FLUSH only support SYNC|ASYNC option"
SCRIPT_DEBUG_OPTION = "ERR Use SCRIPT DEBUG YES/SYNC/NO"
SCRIPT_DEBUG_UNSUPPORTED = (
    "ERR SCRIPT DEBUG is not supported by the streamworker engine (no Lua debugger)"
)
SCRIPT_INVALID_SHEBANG = "ERR Invalid script shebang"
SCRIPT_RO_WITH_WRITE_FLAG = "ERR Can not execute a script with write flag using *_ro command."
SCRIPT_KILLED = "ERR Script killed by user with SCRIPT KILL..."
# What redis.call / redis.pcall report (the err field of the error table).
SCRIPT_NO_ARGS = "ERR Please specify at least one argument for this redis lib call"
SCRIPT_BAD_ARG_TYPE = "ERR Lua redis lib command arguments must be strings or integers"
SCRIPT_UNKNOWN_COMMAND = "ERR Unknown Redis command called from script"
SCRIPT_WRONG_ARITY = "ERR Wrong number of args calling Redis command from script"
SCRIPT_COMMAND_NOT_ALLOWED = "ERR This Redis command is not allowed from script"
SCRIPT_WRITE_IN_READ_ONLY = "ERR Write commands are not allowed from read-only scripts."
# The other redis.* functions.
SCRIPT_SETRESP_ARGS = "ERR redis.setresp() requires one argument."
SCRIPT_SETRESP_VERSION = "ERR RESP version must be 2 or 3."
SCRIPT_LOG_ARGS = "ERR redis.log() requires two arguments or more."
SCRIPT_LOG_LEVEL_NOT_NUMBER = "ERR First argument must be a number (log level)."
SCRIPT_LOG_INVALID_LEVEL = "ERR Invalid debug level."
SCRIPT_SHA1HEX_ARGS = "ERR wrong number of arguments"
SCRIPT_SET_REPL_ARGS = "ERR redis.set_repl() requires two arguments."
SCRIPT_SET_REPL_FLAGS = (
    "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE."
)
SCRIPT_ACL_INVALID_COMMAND = "ERR Invalid command passed to redis.acl_check_cmd()"


def script_compile_error(lua_error: str) -> str:
    """A script that does not compile: ``lua_error`` is Lua's ``user_script:1: ...`` text."""
    return f"ERR Error compiling script (new function): {lua_error}"


def script_unexpected_engine(first_word: str) -> str:
    """A shebang naming another engine than ``#!lua``."""
    return f"ERR Unexpected engine in script shebang: {first_word}"


def script_unknown_shebang_option(option: str) -> str:
    """A shebang option other than ``flags=``."""
    return f"ERR Unknown lua shebang option: {option}"


def script_unexpected_flag(flag: str) -> str:
    """A ``flags=`` entry Redis 7.0 does not know."""
    return f"ERR Unexpected flag in script shebang: {flag}"


# --- moved here from the engine modules (engine-cut): the texts that were inline -------------
# One block so that a merge with additions above stays easy; sorted by the module that sends them.


# core.py
MISCONF_RDB = (
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist "
    "to disk. Commands that may modify the data set are disabled, because this instance is "
    "configured to report errors during writes if RDB snapshotting fails "
    "(stop-writes-on-bgsave-error option). Please check the Redis logs for details about the "
    "RDB error."
)


def misconf_aof(write_error: object) -> str:
    """A write refused because the last write to the append-only file failed."""
    return f"MISCONF Errors writing to the AOF file: {write_error}"


def execabort_because(reason: str) -> str:
    """EXEC of a transaction that a queued command's error (``reason``, without ``ERR ``)
    discarded."""
    return f"EXECABORT Transaction discarded because of: {reason}"


# scripting.py
def script_run_failed(sha: str, error: object) -> str:
    """A script that failed in the Lua runtime itself (out of memory, an engine bug)."""
    return f"ERR Error running script {sha}: {error}"


def script_bad_reply(sha: str, detail: str) -> str:
    """A script whose reply could not be converted (``detail``: at most 100 characters; the
    trailing space is Redis's)."""
    return f"ERR Error running script {sha}, {detail} "


# commands/connection.py
def hello_syntax(option: str) -> str:
    """HELLO with an option it does not know (or without its arguments)."""
    return f"ERR Syntax error in HELLO option '{option}'"


def unknown_client_type(kind: str) -> str:
    """CLIENT LIST / KILL TYPE with an unknown type."""
    return f"ERR Unknown client type '{kind}'"


INVALID_CLIENT_ID = "ERR Invalid client ID"
CLIENT_UNBLOCK_REASON = "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"
UNBLOCKED_BY_CLIENT = "UNBLOCKED client unblocked via CLIENT UNBLOCK"


# commands/_args.py
def not_positive(what: str) -> str:
    """A negative where a non-negative count is needed (``what``: ``value``, ``count``...)."""
    return f"ERR {what} is out of range, must be positive"


# commands/server.py
INVALID_FIRST_DB = "ERR invalid first DB index"
INVALID_SECOND_DB = "ERR invalid second DB index"
NO_CONFIG_FILE = "ERR The server is running without a config file"
GETKEYS_INVALID_COMMAND = "ERR Invalid command specified"
GETKEYS_NO_KEYS = "ERR The command has no key arguments"
GETKEYS_WRONG_ARITY = "ERR Invalid number of arguments specified for command"
GETKEYS_INVALID_ARGUMENTS = "ERR Invalid arguments specified for command"
DEBUG_NOT_ALLOWED = (
    'ERR DEBUG command not allowed. If the enable-debug-command option is set to "local", '
    "you can run it from a local connection, otherwise you need to set this option in the "
    "configuration file, and then restart the server."
)
# The engine's own text (Redis always has an AOF to rewrite).
BGREWRITEAOF_IN_MEMORY = (
    "ERR the engine runs in memory: there is no append-only file to rewrite "
    "(start it with a data directory: streamworker engine serve --dir DIR)"
)
BGREWRITEAOF_IN_PROGRESS = "ERR Background append only file rewriting already in progress"


def bgrewriteaof_failed(error: object) -> str:
    """BGREWRITEAOF that could not start the rewrite (``error``: the OS error)."""
    return f"ERR Background append only file rewriting failed: {error}"


# --- end of the engine-cut block -------------------------------------------------------------

# --- SRANDMEMBER's bound, COPY, OBJECT ------------------------------------------------------

# SRANDMEMBER with a negative count replies with -count members, repeats allowed: Redis builds
# that reply whatever its size; the engine refuses counts past this bound (a documented
# divergence: the alternative is a server that stops answering).
SRANDMEMBER_MAX_REPEATS = 1 << 20
SRANDMEMBER_REPEATS_OUT_OF_RANGE = (
    f"ERR value is out of range, the embedded engine repeats at most "
    f"{SRANDMEMBER_MAX_REPEATS} members"
)
COPY_SAME_OBJECT = "ERR source and destination objects are the same"
OBJECT_FREQ_NOT_LFU = (
    "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that "
    "when switching between policies at runtime LRU and LFU data will take some time to adjust."
)
OBJECT_IDLETIME_LFU = (
    "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when "
    "switching between policies at runtime LRU and LFU data will take some time to adjust."
)

# --- DUMP / RESTORE / SAVE (commands/rdb.py) ----------------------------------------------

BUSYKEY = "BUSYKEY Target key name already exists."
DUMP_PAYLOAD = "ERR DUMP payload version or checksum are wrong"
BAD_DATA_FORMAT = "ERR Bad data format"
RESTORE_TTL = "ERR Invalid TTL value, must be >= 0"
RESTORE_IDLETIME = "ERR Invalid IDLETIME value, must be >= 0"
RESTORE_FREQ = "ERR Invalid FREQ value, must be >= 0 and <= 255"
BGSAVE_IN_PROGRESS = "ERR Background save already in progress"


# --- Pub/Sub -------------------------------------------------------------------------------


def subscribed_context(cmd: str) -> str:
    """A RESP2 client in subscribed mode ran something else (``cmd`` is the full name,
    ``client|list`` for a subcommand)."""
    return (
        f"ERR Can't execute '{cmd}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / "
        "RESET are allowed in this context"
    )


def deny_blocking_subscribe(cmd_upper: str) -> str:
    """SSUBSCRIBE inside EXEC (Redis 7.0 refuses it; SUBSCRIBE and PSUBSCRIBE are allowed)."""
    return f"ERR {cmd_upper} isn't allowed for a DENY BLOCKING client"


# CONFIG SET notify-keyspace-events with a letter outside A g $ l s h z x e K E t m d n
# (the reason part of the CONFIG SET error).
NOTIFY_KEYSPACE_EVENTS_INVALID = "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."


# --- HyperLogLog ---------------------------------------------------------------------------

HLL_WRONGTYPE = "WRONGTYPE Key is not a valid HyperLogLog string value."
HLL_CORRUPTED = "INVALIDOBJ Corrupted HLL object detected"
HLL_NO_SUCH_KEY = "ERR The specified key does not exist"
HLL_NOT_SPARSE = "ERR HLL encoding is not sparse"


def hll_unknown_debug(sub: bytes) -> str:
    """PFDEBUG with an unknown subcommand (echoed as typed)."""
    return "ERR Unknown PFDEBUG subcommand '" + sub.decode("utf-8", "surrogateescape") + "'"


# --- geo -----------------------------------------------------------------------------------

GEO_UNIT = "ERR unsupported unit provided. please use M, KM, FT, MI"
GEO_NEED_RADIUS = "ERR need numeric radius"
GEO_NEGATIVE_RADIUS = "ERR radius cannot be negative"
GEO_NEED_WIDTH = "ERR need numeric width"
GEO_NEED_HEIGHT = "ERR need numeric height"
GEO_NEGATIVE_BOX = "ERR height or width cannot be negative"
GEO_NO_MEMBER = "ERR could not decode requested zset member"
GEO_COUNT = "ERR COUNT must be > 0"
GEO_ANY_NEEDS_COUNT = "ERR the ANY argument requires COUNT argument"


def geo_invalid_pair(lon: float, lat: float) -> str:
    """GEOADD / GEORADIUS / FROMLONLAT outside the supported area (printed with ``%f``)."""
    return f"ERR invalid longitude,latitude pair {lon:f},{lat:f}"


def geo_store_with(searchstore: bool) -> str:
    """STORE / GEOSEARCHSTORE combined with WITHDIST, WITHHASH or WITHCOORD."""
    what = "GEOSEARCHSTORE" if searchstore else "STORE option in GEORADIUS"
    return f"ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"


def geo_need_from(command_name: bytes) -> str:
    """GEOSEARCH without FROMMEMBER / FROMLONLAT (the command name as typed)."""
    name = command_name.decode("utf-8", "surrogateescape")
    return f"ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"


def geo_need_by(command_name: bytes) -> str:
    """GEOSEARCH without BYRADIUS / BYBOX (the command name as typed)."""
    name = command_name.decode("utf-8", "surrogateescape")
    return f"ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"


# --- administration: MONITOR, CLIENT KILL/PAUSE/REPLY/TRACKING, replication, cluster --------

REPLICA_KEYSPACE = "ERR Replica can't interact with the keyspace"
# A replica's refusals (Redis's shared.roslaveerr, masterdownerr, and replicaofCommand's).
READONLY_REPLICA = "READONLY You can't write against a read only replica."
MASTERDOWN = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
MASTERDOWN_SCRIPT = (
    "MASTERDOWN Link with MASTER is down, replica-serve-stale-data is set to 'no' and "
    "'allow-stale' flag is not set on the script."
)
SCRIPT_ON_STALE_REPLICA = "ERR Can not execute the command on a stale replica"
SCRIPT_WRITE_FLAG_ON_READONLY_REPLICA = (
    "READONLY Can not run script with write flag on readonly replica"
)
REPLICAOF_FROM_REPLICA = "ERR Command is not valid when client is a replica."
ALREADY_CONNECTED_TO_MASTER = "OK Already connected to specified master"
WAIT_ON_REPLICA = (
    "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if "
    "a replica is configured to be writable (which is not the default) writes to replicas are "
    "just local and are not propagated."
)
NOREPLICAS = "NOREPLICAS Not enough good replicas to write."
NOMASTERLINK = "NOMASTERLINK Can't SYNC while not connected with my master"
CLUSTER_DISABLED = "ERR This instance has cluster support disabled"
NO_SUCH_CLIENT = "ERR No such client"
CLIENT_ID_NOT_POSITIVE = "ERR client-id should be greater than 0"
CLIENT_PAUSE_MODE = "ERR CLIENT PAUSE mode must be WRITE or ALL"
INVALID_MASTER_PORT = "ERR Invalid master port"
NO_SHUTDOWN_IN_PROGRESS = "ERR No shutdown in progress."
SHUTDOWN_ERRORS = "ERR Errors trying to SHUTDOWN. Check logs."
NO_FAILOVER_IN_PROGRESS = "ERR No failover in progress."
FAILOVER_TIMEOUT_NOT_POSITIVE = "ERR FAILOVER timeout must be greater than 0"
FAILOVER_NO_REPLICAS = "ERR FAILOVER requires connected replicas."
MIGRATE_KEYS_NEEDS_EMPTY_KEY = (
    "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string"
)
MODULE_NOT_ALLOWED = (
    'ERR MODULE command not allowed. If the enable-module-command option is set to "local", '
    "you can run it from a local connection, otherwise you need to set this option in the "
    "configuration file, and then restart the server."
)
TRACKING_PREFIX_NEEDS_BCAST = "ERR PREFIX option requires BCAST mode to be enabled"
TRACKING_OPTIN_AND_OPTOUT = "ERR You can't specify both OPTIN mode and OPTOUT mode"
TRACKING_OPT_WITH_BCAST = "ERR OPTIN and OPTOUT are not compatible with BCAST"
TRACKING_REDIRECT_MISSING = "ERR The client ID you want redirect to does not exist"
TRACKING_CACHING_NEEDS_OPT = (
    "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or "
    "OPTOUT mode enabled"
)
ACL_GENPASS_BITS = (
    "ERR ACL GENPASS argument must be the number of bits for the output password, a positive "
    "number up to 4096"
)
ACL_DEFAULT_NOT_REMOVABLE = "ERR The 'default' user cannot be removed"
ACL_NO_FILE = (
    "ERR This Redis instance is not configured to use an ACL file. You may want to specify users "
    "via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis "
    "configuration file set) in order to store users in the Redis configuration."
)

# What the engine refuses because it is one process that talks to no other server (documented
# divergences: redis-server would start replicating, fail over or open a connection).
ENGINE_REPLICA_NEEDS_SERVER = (
    "ERR REPLICAOF <host> <port> needs the engine's server (streamworker engine serve): an "
    "in-process engine has no event loop to run the link to a master (REPLICAOF NO ONE works)"
)
SYNC_NEEDS_CONNECTION = (
    "ERR SYNC and PSYNC need a network connection (the replication stream is sent over it)"
)
ENGINE_NO_MIGRATE = (
    "ERR the streamworker engine does not connect to other servers: MIGRATE is not supported "
    "(use DUMP/RESTORE through a client)"
)
ENGINE_NEEDS_CONNECTION = "ERR {} needs a network connection (not available in-process)"


def no_such_user(user: str) -> str:
    """``ERR No such user 'x'`` (CLIENT KILL USER)."""
    return f"ERR No such user '{user}'"


def acl_unknown_category(cat: str) -> str:
    """``ERR Unknown category 'x'`` (ACL CAT)."""
    return f"ERR Unknown category '{cat}'"


def acl_user_not_found(user: str) -> str:
    """``ERR User 'x' not found`` (ACL DRYRUN)."""
    return f"ERR User '{user}' not found"


def acl_command_not_found(cmd: str) -> str:
    """``ERR Command 'x' not found`` (ACL DRYRUN)."""
    return f"ERR Command '{cmd}' not found"


NOREPLICAS = "NOREPLICAS Not enough good replicas to write."

# ACL users (Redis 7.0's texts).
SORT_BY_ACL = "ERR BY option of SORT denied due to insufficient ACL permissions."
SORT_GET_ACL = "ERR GET option of SORT denied due to insufficient ACL permissions."
ACL_USERNAME_SPACES = "ERR Usernames can't contain spaces or null characters"
NOPERM_KEYS = "NOPERM this user has no permissions to access one of the keys used as arguments"
NOPERM_CHANNELS = (
    "NOPERM this user has no permissions to access one of the channels used as arguments"
)
SCRIPT_ACL_DENIED = {
    1: "The user executing the script can't run this command or subcommand",
    2: "The user executing the script can't access at least one of the keys mentioned in the "
    "command arguments",
    4: "The user executing the script can't publish to the channel mentioned in the command",
}
"""redis.call refused by ACL, by reason (DENIED_CMD, DENIED_KEY, DENIED_CHANNEL)."""
EXEC_ACL_DENIED = {
    1: "no permission to execute the command or subcommand",
    2: "no permission to touch the specified keys",
    4: "no permission to access one of the channels used as arguments",
}
"""A queued command the user may no longer run at EXEC, by reason."""


def noperm_command(name: str) -> str:
    """``NOPERM this user has no permissions to run the 'x' command``."""
    return f"NOPERM this user has no permissions to run the '{name}' command"


def exec_acl_changed(reason: str) -> str:
    """EXEC's reply for a queued command the ACL rules no longer allow."""
    return (
        "NOPERM ACLs rules changed between the moment the transaction was accumulated and the "
        f"EXEC call. This command is no longer allowed for the following reason: {reason}"
    )


def acl_setuser_error(text: str) -> str:
    """An ACL SETUSER refusal (``text`` is Redis's ``Error in ACL SETUSER modifier ...``)."""
    return "ERR " + text


def dryrun_denied_command(name: str) -> str:
    """ACL DRYRUN's (bulk) answer for a command the user may not run."""
    return f"This user has no permissions to run the '{name}' command"


def dryrun_denied_key(key: str) -> str:
    """ACL DRYRUN's (bulk) answer for a key the user may not touch."""
    return f"This user has no permissions to access the '{key}' key"


def dryrun_denied_channel(channel: str) -> str:
    """ACL DRYRUN's (bulk) answer for a channel the user may not use."""
    return f"This user has no permissions to access the '{channel}' channel"


# --- Redis 8.x stream texts (an 8.x engine only, see commands/streams_r8.py) ------------------
# No Redis 8 server can be installed next to the tests, so these are not compared byte for
# byte like the 7.0 texts above: they keep 7.0's wording where 8.x reuses a check (integers,
# IDs, NOGROUP) and say the rest plainly. docs/engine-redis8.md lists them as known
# differences.

XREADGROUP_CLAIM_MIN_IDLE = "ERR Invalid min-idle-time argument for CLAIM"
XREAD_CLAIM_OPTION = (
    "ERR The CLAIM option is only supported by XREADGROUP. You called XREAD instead."
)
IDS_NUMIDS = "ERR Number of IDs must be a positive integer"
IDS_NUMIDS_MISMATCH = "ERR The `numids` parameter must match the number of arguments"
XNACK_MODE_MISSING = "ERR XNACK needs one of SILENT, FAIL or FATAL"
XNACK_RETRYCOUNT = "ERR Invalid RETRYCOUNT argument for XNACK"
XCFGSET_DURATION = "ERR invalid duration"
XCFGSET_MAXSIZE = "ERR invalid maxsize"
READ_MAXCOUNT = "ERR MAXCOUNT must be a positive integer"
READ_MAXSIZE = "ERR MAXSIZE must be a positive integer"
READ_MAXCOUNT_BELOW_COUNT = "ERR MAXCOUNT must be greater than or equal to COUNT"
