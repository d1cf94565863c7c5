"""ACL users as Redis 7.0 has them: users, their selectors, the rule grammar of ACL SETUSER,
the description ACL LIST / ACL GETUSER give back, and the permission checks.

A user has flags (on/off, nopass, sanitize-payload), SHA-256 password hashes and a list of
selectors, the first of which is the *root* selector (the rules given outside parentheses).
A selector holds the commands it allows (a set of full command names: ``get``,
``config|get``, and container names such as ``config``), first-argument exceptions
(``+select|0``), key patterns with read/write permissions and channel patterns. A command
runs when any one selector allows it, its keys and its channels.

The command universe (every command and subcommand, with its ACL categories) comes from the
engine's command table: :class:`Commands`. Everything here is pure data manipulation; the
dispatcher (``core.py``), the ACL commands (``commands/acl.py``), AUTH/HELLO and the
scripting bridge call into it.

Where this differs from redis-server 7.0: the order of single-command rules in a described
user (Redis walks a hash table with a random seed, so its order changes per process); a key
pattern with no permission letter (``%~x``), which crashes Redis 7.0 at describe time, is a
syntax error here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from streamworker.engine.keyspace import glob_match
from streamworker.engine.protocol import parse_inline_args

if TYPE_CHECKING:
    from streamworker.engine.table import CommandSpec

__all__ = [
    "DENIED_AUTH",
    "DENIED_CHANNEL",
    "DENIED_CMD",
    "DENIED_KEY",
    "OK",
    "AclRuleError",
    "Commands",
    "Selector",
    "User",
    "Users",
    "categories_of",
    "command_categories",
    "hash_password",
]

# Redis's ACL_OK / ACL_DENIED_* values: when several selectors refuse, the larger one wins.
OK = 0
DENIED_CMD = 1
DENIED_KEY = 2
DENIED_AUTH = 3
DENIED_CHANNEL = 4

READ = 1
WRITE = 2
ALL = READ | WRITE

# Redis 7.0's categories, in its table's order (ACL CAT, describe's best-fit loop).
CATEGORIES = (
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
)

# The ACL SETUSER error texts by cause (Redis's ACLSetUserStringError).
ERR_UNKNOWN = "Unknown command or category name in ACL"
ERR_SYNTAX = "Syntax error"
ERR_KEYS_AFTER_ALL = (
    "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not "
    "have any effect. Try 'resetkeys' to start with an empty list of patterns"
)
ERR_CHANNELS_AFTER_ALL = (
    "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does "
    "not have any effect. Try 'resetchannels' to start with an empty list of channels"
)
ERR_NO_SUCH_PASSWORD = "The password you are trying to remove from the user does not exist"
ERR_BAD_HASH = (
    "The password hash must be exactly 64 characters and contain only lowercase hexadecimal "
    "characters"
)
ERR_FIRSTARG_OF_SUBCOMMAND = "Allowing first-arg of a subcommand is not supported"

_SPACES = frozenset(b" \t\n\v\f\r\x00")
_HEX = frozenset(b"0123456789abcdef")


class AclRuleError(Exception):
    """An ACL rule that cannot be applied; ``reason`` is Redis's text for the cause."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def hash_password(password: bytes) -> str:
    """The SHA-256 of ``password`` in lowercase hex (how Redis stores passwords)."""
    return hashlib.sha256(password).hexdigest()


def has_spaces(data: bytes) -> bool:
    """True when ``data`` holds white space or NUL (refused in user names and patterns)."""
    return any(b in _SPACES for b in data)


class Commands:
    """The command universe ACL rules refer to: every command and subcommand by full name
    (lowercase), its categories, and each container's subcommands.

    ``categories`` is a function giving a table entry's categories (a container's own are
    Redis's implicit ``slow``)."""

    def __init__(
        self, table: dict[bytes, CommandSpec], categories: Callable[[CommandSpec], set[str]]
    ) -> None:
        self.specs: dict[str, CommandSpec] = {}
        self.cats: dict[str, frozenset[str]] = {}
        self.subs: dict[str, tuple[str, ...]] = {}
        self.order: list[str] = []
        for spec in table.values():
            self._add(spec, categories)
            if spec.subcommands:
                names = []
                for sub in spec.subcommands.values():
                    self._add(sub, categories)
                    names.append(sub.name)
                self.subs[spec.name] = tuple(names)
        self.all = frozenset(self.order)
        # Per category: the entries in it, and what +@cat switches (those and the
        # subcommands of the containers in it, as Redis's ACLChangeSelectorPerm).
        self.members: dict[str, frozenset[str]] = {}
        self.reach: dict[str, frozenset[str]] = {}
        for cat in CATEGORIES:
            members = [n for n in self.order if cat in self.cats[n]]
            reach = set(members)
            for name in members:
                reach.update(self.subs.get(name, ()))
            self.members[cat] = frozenset(members)
            self.reach[cat] = frozenset(reach)

    def _add(self, spec: CommandSpec, categories: Callable[[CommandSpec], set[str]]) -> None:
        self.specs[spec.name] = spec
        self.cats[spec.name] = frozenset(categories(spec))
        self.order.append(spec.name)

    def lookup(self, name: bytes) -> CommandSpec | None:
        """Redis's ACLLookupCommand: ``cmd`` or ``container|sub`` (case-insensitive)."""
        parts = name.lower().split(b"|")
        if len(parts) > 2:
            return None
        try:
            text = "|".join(p.decode("ascii") for p in parts)
        except UnicodeDecodeError:
            return None
        if len(parts) == 2 and parts[0].decode("ascii") not in self.subs:
            return None
        return self.specs.get(text)


class Selector:
    """One selector: allowed commands, first-arg exceptions, key and channel patterns."""

    __slots__ = (
        "all_channels",
        "all_commands",
        "all_keys",
        "allowed",
        "channels",
        "firstargs",
        "future",
        "keys",
        "root",
    )

    def __init__(self, root: bool, all_channels: bool) -> None:
        self.root = root
        self.allowed: set[str] = set()
        # Redis's reserved command bit: set by +@all only (the user may run commands that
        # did not exist yet); describe starts from +@all when it is set.
        self.future = False
        self.all_commands = False
        self.firstargs: dict[str, list[bytes]] = {}
        self.keys: list[list[Any]] = []  # [pattern, READ|WRITE]
        self.all_keys = False
        self.channels: list[bytes] = []
        self.all_channels = all_channels

    def copy(self) -> Selector:
        dup = Selector(self.root, self.all_channels)
        dup.allowed = set(self.allowed)
        dup.future = self.future
        dup.all_commands = self.all_commands
        dup.firstargs = {k: list(v) for k, v in self.firstargs.items()}
        dup.keys = [list(k) for k in self.keys]
        dup.all_keys = self.all_keys
        dup.channels = list(self.channels)
        return dup

    # -- rules ------------------------------------------------------------------------------

    def _perm(self, commands: Commands, name: str, allow: bool) -> None:
        # Redis's ACLChangeSelectorPerm: a container takes its subcommands along.
        names = (name, *commands.subs.get(name, ()))
        if allow:
            self.allowed.update(names)
        else:
            self.allowed.difference_update(names)
            self.all_commands = False
        self.firstargs.pop(name, None)

    def apply(self, commands: Commands, op: bytes) -> None:
        """Apply one selector rule (keys, channels, commands); raises AclRuleError."""
        low = op.lower()
        if low in (b"allkeys", b"~*"):
            self.all_keys = True
            self.keys = []
        elif low == b"resetkeys":
            self.all_keys = False
            self.keys = []
        elif low in (b"allchannels", b"&*"):
            self.all_channels = True
            self.channels = []
        elif low == b"resetchannels":
            self.all_channels = False
            self.channels = []
        elif low in (b"allcommands", b"+@all"):
            self.allowed = set(commands.all)
            self.future = True
            self.all_commands = True
            self.firstargs = {}
        elif low in (b"nocommands", b"-@all"):
            self.allowed = set()
            self.future = False
            self.all_commands = False
            self.firstargs = {}
        elif op[:1] in (b"~", b"%"):
            self._add_key_pattern(op)
        elif op[:1] == b"&":
            if self.all_channels:
                raise AclRuleError(ERR_CHANNELS_AFTER_ALL)
            pattern = op[1:]
            if has_spaces(pattern):
                raise AclRuleError(ERR_SYNTAX)
            if pattern not in self.channels:
                self.channels.append(pattern)
            self.all_channels = False
        elif op[:1] in (b"+", b"-") and op[1:2] == b"@":
            cat = op[2:].lower().decode("utf-8", "replace")
            if cat not in commands.reach:
                raise AclRuleError(ERR_UNKNOWN)
            allow = op[:1] == b"+"
            for name in commands.members[cat]:
                self.firstargs.pop(name, None)
            if allow:
                self.allowed |= commands.reach[cat]
            else:
                self.allowed -= commands.reach[cat]
                if commands.reach[cat]:
                    self.all_commands = False
        elif op[:1] == b"+":
            self._allow_command(commands, op[1:])
        elif op[:1] == b"-":
            spec = commands.lookup(op[1:])
            if spec is None:
                raise AclRuleError(ERR_UNKNOWN)
            self._perm(commands, spec.name, False)
        else:
            raise AclRuleError(ERR_SYNTAX)

    def _add_key_pattern(self, op: bytes) -> None:
        if self.all_keys:
            raise AclRuleError(ERR_KEYS_AFTER_ALL)
        flags = 0
        offset = 1
        if op[:1] == b"%":
            n = len(op)
            while offset < n:
                c = op[offset : offset + 1].upper()
                if c == b"R" and not flags & READ:
                    flags |= READ
                elif c == b"W" and not flags & WRITE:
                    flags |= WRITE
                elif c == b"~":
                    offset += 1
                    break
                else:
                    raise AclRuleError(ERR_SYNTAX)
                offset += 1
            if not flags:
                # Redis 7.0 accepts it and then panics describing the user.
                raise AclRuleError(ERR_SYNTAX)
        else:
            flags = ALL
        pattern = op[offset:]
        if has_spaces(pattern):
            raise AclRuleError(ERR_SYNTAX)
        for entry in self.keys:
            if entry[0] == pattern:
                entry[1] |= flags
                break
        else:
            self.keys.append([pattern, flags])
        self.all_keys = False

    def _allow_command(self, commands: Commands, name: bytes) -> None:
        bar = name.rfind(b"|")
        if bar < 0:
            spec = commands.lookup(name)
            if spec is None:
                raise AclRuleError(ERR_UNKNOWN)
            self._perm(commands, spec.name, True)
            return
        base = commands.lookup(name[:bar])
        if base is None:
            raise AclRuleError(ERR_UNKNOWN)
        if base.container is not None:
            raise AclRuleError(ERR_FIRSTARG_OF_SUBCOMMAND)
        first = name[bar + 1 :]
        if not first:
            raise AclRuleError(ERR_SYNTAX)
        if base.name in commands.subs:
            spec = commands.lookup(name)
            if spec is None:
                raise AclRuleError(ERR_UNKNOWN)
            self._perm(commands, spec.name, True)
            return
        # SELECT|0-style: the command is allowed with that first argument only (deprecated
        # in Redis 7.0 but still honoured).
        allowed = self.firstargs.setdefault(base.name, [])
        if all(a.lower() != first.lower() for a in allowed):
            allowed.append(first)

    # -- description ------------------------------------------------------------------------

    def describe_commands(self, commands: Commands) -> str:
        """The command rules that rebuild this selector's command set (Redis's
        ACLDescribeSelectorCommandRules: +@all or -@all, then the best-fitting categories,
        then single commands)."""
        additive = not self.future
        rules = ["-@all" if additive else "+@all"]
        fake: set[str] = set() if additive else set(commands.all)
        temp = set(self.allowed)
        applied: set[str] = set()
        while True:
            best = None
            mindiff = 1 << 62
            maxsame = 0
            for cat in CATEGORIES:
                if cat in applied:
                    continue
                members = commands.members[cat]
                on = len(members & temp)
                off = len(members) - on
                diff, same = (off, on) if additive else (on, off)
                if same > diff and (diff < mindiff or (diff == mindiff and same > maxsame)):
                    best, mindiff, maxsame = cat, diff, same
            if best is None:
                break
            reach = commands.reach[best]
            if additive:
                fake |= reach
                temp -= reach
                rules.append("+@" + best)
            else:
                fake -= reach
                temp |= reach
                rules.append("-@" + best)
            applied.add(best)
        for name in commands.order:
            user_bit = name in self.allowed
            if user_bit != (name in fake):
                rules.append(("+" if user_bit else "-") + name)
                changed = (name, *commands.subs.get(name, ()))
                if user_bit:
                    fake.update(changed)
                else:
                    fake.difference_update(changed)
            if not user_bit:
                for first in self.firstargs.get(name, ()):
                    rules.append(f"+{name}|{first.decode('utf-8', 'surrogateescape')}")
        return " ".join(rules)

    def describe_keys(self) -> bytes:
        """The key patterns as GETUSER shows them (``~*`` for allkeys)."""
        if self.all_keys:
            return b"~*"
        return b" ".join(_pattern_text(p, f) for p, f in self.keys)

    def describe_channels(self) -> bytes:
        """The channel patterns as GETUSER shows them (``&*`` for allchannels)."""
        if self.all_channels:
            return b"&*"
        return b" ".join(b"&" + c for c in self.channels)

    def describe(self, commands: Commands) -> bytes:
        """The selector's rules as ACL LIST shows them."""
        out = []
        if self.all_keys:
            out.append(b"~*")
        else:
            out.extend(_pattern_text(p, f) for p, f in self.keys)
        if self.all_channels:
            out.append(b"&*")
        else:
            out.append(b"resetchannels")
            out.extend(b"&" + c for c in self.channels)
        out.append(self.describe_commands(commands).encode())
        return b" ".join(out)

    # -- checks -----------------------------------------------------------------------------

    def check(
        self, spec: CommandSpec, argv: Sequence[bytes], keys: Callable[[], list[Any]]
    ) -> tuple[int, int]:
        """(OK or DENIED_*, index of the refused key/channel argument). ``keys`` gives the
        command's [(argv index, key, needed READ|WRITE)] (computed once for all
        selectors)."""
        if not self.all_commands and spec.name not in self.allowed and "no-auth" not in spec.flags:
            firsts = self.firstargs.get(spec.name)
            if not firsts or len(argv) < 2:
                return DENIED_CMD, 0
            arg = argv[2 if spec.container is not None else 1].lower()
            if all(f.lower() != arg for f in firsts):
                return DENIED_CMD, 0
        if not self.all_keys:
            for pos, key, needed in keys():
                if not self._key_ok(key, needed):
                    return DENIED_KEY, pos
        if not self.all_channels:
            for pos, channel, is_pattern in channels_of(spec.name, argv):
                if not channel_in(self.channels, channel, is_pattern):
                    return DENIED_CHANNEL, pos
        return OK, 0

    def _key_ok(self, key: bytes, needed: int) -> bool:
        for pattern, flags in self.keys:
            if flags & needed == needed and pattern_match(pattern, key):
                return True
        return False


_GLOB_SPECIAL = frozenset(b"*?[\\")


def pattern_match(pattern: bytes, subject: bytes) -> bool:
    """Redis's glob match of an ACL key or channel pattern, with the common shapes (``*``,
    a literal, ``prefix*``) decided without the general matcher."""
    if pattern == b"*":
        return True
    stem = pattern[:-1] if pattern[-1:] == b"*" else None
    if stem is not None and not any(c in _GLOB_SPECIAL for c in stem):
        return subject.startswith(stem)
    if not any(c in _GLOB_SPECIAL for c in pattern):
        return subject == pattern
    return glob_match(pattern, subject)


def _pattern_text(pattern: bytes, flags: int) -> bytes:
    if flags == ALL:
        return b"~" + pattern
    return (b"%R~" if flags == READ else b"%W~") + pattern


def channel_in(patterns: Iterable[bytes], channel: bytes, is_pattern: bool) -> bool:
    """Redis's ACLCheckChannelAgainstList: a channel matches the patterns as a glob, a
    PSUBSCRIBE pattern only literally."""
    for pattern in patterns:
        if (is_pattern and pattern == channel) or (not is_pattern and glob_match(pattern, channel)):
            return True
    return False


# Commands whose arguments are channels ACL checks: name -> (first index, all the rest?,
# pattern?). UNSUBSCRIBE and friends are never checked.
_CHANNEL_COMMANDS = {
    "publish": (1, False, False),
    "spublish": (1, False, False),
    "subscribe": (1, True, False),
    "ssubscribe": (1, True, False),
    "psubscribe": (1, True, True),
}


def channels_of(name: str, argv: Sequence[bytes]) -> list[tuple[int, bytes, bool]]:
    """The channels ``argv`` publishes or subscribes to: (argv index, channel, is pattern)."""
    spec = _CHANNEL_COMMANDS.get(name)
    if spec is None:
        return []
    first, rest, pattern = spec
    last = len(argv) if rest else min(first + 1, len(argv))
    return [(i, argv[i], pattern) for i in range(first, last)]


class User:
    """One user: name, flags, password hashes, selectors (the root one first)."""

    __slots__ = ("enabled", "flags", "name", "nopass", "passwords", "selectors", "unrestricted")

    def __init__(self, name: bytes, all_channels: bool) -> None:
        self.name = name
        self.enabled = False
        self.nopass = False
        # "sanitize-payload" / "skip-sanitize-payload" (or neither): shown, not enforced.
        self.flags: str | None = None
        self.passwords: list[str] = []
        self.selectors: list[Selector] = [Selector(True, all_channels)]
        # True when the root selector allows every command, key and channel and there is
        # no other selector: the dispatcher's fast path skips every check then.
        self.unrestricted = False

    @property
    def root(self) -> Selector:
        return self.selectors[0]

    def copy_from(self, other: User) -> None:
        self.enabled = other.enabled
        self.nopass = other.nopass
        self.flags = other.flags
        self.passwords = list(other.passwords)
        self.selectors = [s.copy() for s in other.selectors]
        self.refresh()

    def refresh(self) -> None:
        root = self.root
        self.unrestricted = (
            root.all_commands and root.all_keys and root.all_channels and len(self.selectors) == 1
        )

    def apply(self, commands: Commands, op: bytes, all_channels: bool) -> None:
        """Apply one ACL SETUSER rule (Redis's ACLSetUser); raises AclRuleError."""
        if not op:
            return
        low = op.lower()
        if low == b"on":
            self.enabled = True
        elif low == b"off":
            self.enabled = False
        elif low == b"skip-sanitize-payload":
            self.flags = "skip-sanitize-payload"
        elif low == b"sanitize-payload":
            self.flags = "sanitize-payload"
        elif low == b"nopass":
            self.nopass = True
            self.passwords = []
        elif low == b"resetpass":
            self.nopass = False
            self.passwords = []
        elif op[:1] in (b">", b"#"):
            digest = hash_password(op[1:]) if op[:1] == b">" else _checked_hash(op[1:])
            if digest not in self.passwords:
                self.passwords.append(digest)
            self.nopass = False
        elif op[:1] in (b"<", b"!"):
            digest = hash_password(op[1:]) if op[:1] == b"<" else _checked_hash(op[1:])
            if digest not in self.passwords:
                raise AclRuleError(ERR_NO_SUCH_PASSWORD)
            self.passwords.remove(digest)
        elif op[:1] == b"(" and op[-1:] == b")":
            selector = Selector(False, all_channels)
            # Redis splits the inside as sdssplitargs does (quotes allowed); unbalanced
            # quotes leave it with no rule at all.
            for word in parse_inline_args(op[1:-1]) or []:
                selector.apply(commands, word)
            self.selectors.append(selector)
        elif low == b"clearselectors":
            del self.selectors[1:]
        elif low == b"reset":
            self.nopass = False
            self.passwords = []
            root = self.root
            root.apply(commands, b"resetkeys")
            root.apply(commands, b"resetchannels")
            if all_channels:
                root.apply(commands, b"allchannels")
            self.enabled = False
            self.flags = "sanitize-payload"
            del self.selectors[1:]
            root.apply(commands, b"-@all")
        else:
            self.root.apply(commands, op)

    def check_password(self, password: bytes) -> bool:
        """True when the user is enabled and ``password`` is one of its (or it has none)."""
        if not self.enabled:
            return False
        if self.nopass:
            return True
        return hash_password(password) in self.passwords

    def flag_names(self) -> list[str]:
        """The flags in Redis's order (on, off, nopass, skip-sanitize-payload,
        sanitize-payload)."""
        out = ["on" if self.enabled else "off"]
        if self.nopass:
            out.append("nopass")
        if self.flags is not None:
            out.append(self.flags)
        return out

    def describe(self, commands: Commands) -> bytes:
        """The user's rules as ACL LIST shows them (without ``user <name>``)."""
        parts = [f.encode() for f in self.flag_names()]
        parts.extend(b"#" + p.encode() for p in self.passwords)
        text = b" ".join(parts)
        for selector in self.selectors:
            described = selector.describe(commands)
            if selector.root:
                text += b" " + described
            else:
                text += b" (" + described + b")"
        return text

    def check(
        self, spec: CommandSpec, argv: Sequence[bytes], keys: Callable[[], list[Any]]
    ) -> tuple[int, int]:
        """Redis's ACLCheckAllUserCommandPerm: (OK or the most relevant DENIED_*, index of
        the argument refused)."""
        if len(self.selectors) == 1:
            return self.selectors[0].check(spec, argv, keys)
        relevant, last_idx = DENIED_CMD, 0
        cache: list[list[Any]] = []

        def cached_keys() -> list[Any]:
            if not cache:
                cache.append(keys())
            return cache[0]

        for selector in self.selectors:
            result, idx = selector.check(spec, argv, cached_keys)
            if result == OK:
                return OK, 0
            if result > relevant or (result == relevant and idx > last_idx):
                relevant, last_idx = result, idx
        return relevant, last_idx

    def full_key_access(
        self, spec: CommandSpec, argv: Sequence[bytes], keys: Callable[[], list[Any]]
    ) -> bool:
        """Redis's ACLUserCheckCmdWithUnrestrictedKeyAccess for reads: some selector allows
        the call and may read every key (allkeys, or a ``*`` pattern with read)."""
        for selector in self.selectors:
            if selector.check(spec, argv, keys)[0] != OK:
                continue
            if selector.all_keys or any(p == b"*" and f & READ for p, f in selector.keys):
                return True
        return False

    def allows_all_channels(self) -> bool:
        return any(s.all_channels for s in self.selectors)


def _checked_hash(text: bytes) -> str:
    if len(text) != 64 or any(c not in _HEX for c in text):
        raise AclRuleError(ERR_BAD_HASH)
    return text.decode("ascii")


def merge_selector_args(args: Sequence[bytes]) -> list[bytes] | int:
    """Redis's ACLMergeSelectorArguments: a selector spread over several arguments
    (``(~x`` ... ``+get)``) becomes one; returns the index of an unclosed ``(`` instead."""
    out: list[bytes] = []
    current: bytes | None = None
    start = -1
    for i, op in enumerate(args):
        if current is None and op[:1] == b"(" and op[-1:] != b")":
            current = op
            start = i
            continue
        if current is not None:
            current += b" " + op
            if op[-1:] == b")":
                out.append(current)
                current = None
            continue
        out.append(op)
    if current is not None:
        return start
    return out


class Users:
    """The user table (``default`` always exists) and the ACL log."""

    def __init__(self, commands: Commands) -> None:
        self.commands = commands
        self.all_channels_default = False
        self.users: dict[bytes, User] = {}
        self.default = self._create(b"default")
        for op in (b"+@all", b"~*", b"&*", b"on", b"nopass"):
            self.default.apply(commands, op, False)
        self.default.refresh()
        # ACL LOG entries, newest first (dicts: count, reason, context, object, username,
        # ctime_ms, cinfo).
        self.log: list[dict[str, Any]] = []

    def _create(self, name: bytes) -> User:
        user = User(name, self.all_channels_default)
        self.users[name] = user
        return user

    def get(self, name: bytes) -> User | None:
        return self.users.get(name)

    def names(self) -> list[bytes]:
        """User names in Redis's (radix tree) order: bytewise."""
        return sorted(self.users)

    def setuser(self, name: bytes, ops: Sequence[bytes]) -> tuple[User, User | None]:
        """Apply ``ops`` to ``name`` (created when missing) all or nothing. Returns (the
        user, a copy of it as it was before, or None when it was created). Raises
        AclRuleError with Redis's full message."""
        merged = merge_selector_args(ops)
        if isinstance(merged, int):
            text = ops[merged].decode("utf-8", "surrogateescape")
            raise AclRuleError(f"Unmatched parenthesis in acl selector starting at '{text}'.")
        existing = self.users.get(name)
        temp = User(name, self.all_channels_default)
        if existing is not None:
            temp.copy_from(existing)
        for op in merged:
            try:
                temp.apply(self.commands, op, self.all_channels_default)
            except AclRuleError as exc:
                shown = op.split(b"\x00", 1)[0].decode("utf-8", "surrogateescape")
                raise AclRuleError(
                    f"Error in ACL SETUSER modifier '{shown}': {exc.reason}"
                ) from None
        before = None
        if existing is None:
            existing = self._create(name)
        else:
            before = User(name, False)
            before.copy_from(existing)
        existing.copy_from(temp)
        return existing, before

    def set_default_password(self, password: str) -> None:
        """requirepass: the default user's one password (none: nopass)."""
        user = self.default
        user.apply(self.commands, b"resetpass", False)
        if password:
            user.apply(self.commands, b">" + password.encode("utf-8", "surrogateescape"), False)
        else:
            user.apply(self.commands, b"nopass", False)

    def auth_required(self) -> bool:
        """Redis's authRequired for a client that has not authenticated: the default user
        needs a password or is off."""
        return not self.default.nopass or not self.default.enabled


# The data-type (or family) category of each command module.
_MODULE_CATEGORY = {
    "keys": "keyspace",
    "strings": "string",
    "bits": "bitmap",
    "hashes": "hash",
    "sets": "set",
    "zsets": "sortedset",
    "lists": "list",
    "streams": "stream",
    "streams_r8": "stream",
    "scripting": "scripting",
    "transactions": "transaction",
    "connection": "connection",
    "hyperloglog": "hyperloglog",
    "geo": "geo",
    "pubsub": "pubsub",
    "functions": "scripting",
}
# Commands whose categories Redis sets apart from their family's rule.
_EXTRA = {
    "sort": ("set", "sortedset", "list", "dangerous"),
    "sort_ro": ("set", "sortedset", "list", "dangerous"),
    "client|list": ("admin", "dangerous"),
    "lastsave": ("admin", "dangerous"),
    "command": ("connection",),
    "function": ("scripting",),
    "keys": ("dangerous",),
    "flushall": ("keyspace", "dangerous"),
    "flushdb": ("keyspace", "dangerous"),
    "swapdb": ("keyspace", "dangerous"),
    "dbsize": ("keyspace",),
    "randomkey": ("keyspace",),
    "scan": ("keyspace",),
    "info": ("dangerous",),
    "role": ("admin", "dangerous"),
    "migrate": ("keyspace", "dangerous"),
    "restore": ("keyspace", "dangerous"),
    "dump": ("keyspace",),
    "lolwut": (),
    "wait": ("connection",),
    "readonly": ("connection",),
    "readwrite": ("connection",),
    "asking": ("connection",),
    "select": ("connection",),
    "debug": ("admin", "dangerous"),
}


# Commands Redis 7.0 leaves out of their module's category.
_OUTSIDE_FAMILY = frozenset({"pubsub|help"})


def categories_of(spec: CommandSpec) -> set[str]:
    """The ACL categories of ``spec`` (a command or a subcommand)."""
    cats: set[str] = set()
    func = spec.func
    module = func.__module__.rsplit(".", 1)[-1] if func is not None else ""
    family = _MODULE_CATEGORY.get(module)
    if family is not None and spec.name not in _OUTSIDE_FAMILY:
        cats.add(family)
    flags = spec.flags
    if "write" in flags:
        cats.add("write")
    if "readonly" in flags and module not in ("scripting", "functions"):
        cats.add("read")
    if "admin" in flags:
        cats.update(("admin", "dangerous"))
    cats.add("fast" if "fast" in flags else "slow")
    if "blocking" in flags:
        cats.add("blocking")
    base = spec.container or spec.name
    cats.update(_EXTRA.get(spec.name, ()) or _EXTRA.get(base, ()))
    return cats


def command_categories(spec: CommandSpec) -> set[str]:
    """The categories of a table entry as ACL rules see it: a container without a function
    of its own (CONFIG, CLIENT...) has Redis's implicit ``slow`` only."""
    if spec.func is None and spec.subcommands:
        return {"slow"}
    return categories_of(spec)
