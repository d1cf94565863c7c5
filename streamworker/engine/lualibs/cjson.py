"""``cjson``: lua-cjson 2.1.0 as Redis 7.0 bundles it (encode, decode, the configuration
functions and ``cjson.new``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Final, NoReturn

from streamworker.engine.lualibs.common import (
    LibraryBase,
    LuaError,
    items_by_index,
    lua_tostring,
    lua_type,
)


class _CJsonNull:
    """``cjson.null``: a userdata to Lua that prints as Redis's NULL lightuserdata does."""

    __slots__ = ()

    def __str__(self) -> str:
        return "userdata: (nil)"

    def __repr__(self) -> str:
        return "cjson.null"


CJSON_NULL: Final = _CJsonNull()


class CJson(LibraryBase):
    """The ``cjson`` table; each table (``cjson.new()`` makes more) has its own configuration."""

    def table(self) -> Any:
        """A new ``cjson`` table with the default configuration."""
        return self._cjson_table(_CJsonConfig())

    def _cjson_table(self, cfg: _CJsonConfig) -> Any:
        return self._lua.table_from(
            {
                b"encode": lambda *a: self._json_encode(cfg, a),
                b"decode": lambda *a: self._json_decode(cfg, a),
                b"encode_sparse_array": lambda *a: self._cfg_sparse(cfg, a),
                b"encode_max_depth": lambda *a: self._cfg_int(cfg, a, "encode_max_depth", 1),
                b"decode_max_depth": lambda *a: self._cfg_int(cfg, a, "decode_max_depth", 1),
                b"encode_number_precision": lambda *a: self._cfg_int(
                    cfg, a, "encode_number_precision", 1, 14
                ),
                b"encode_keep_buffer": lambda *a: self._cfg_enum(cfg, a, "encode_keep_buffer"),
                b"encode_invalid_numbers": lambda *a: self._cfg_enum(
                    cfg, a, "encode_invalid_numbers", (b"off", b"on", b"null")
                ),
                b"decode_invalid_numbers": lambda *a: self._cfg_enum(
                    cfg, a, "decode_invalid_numbers"
                ),
                b"new": lambda *a: self._cjson_table(_CJsonConfig()),
                b"null": CJSON_NULL,
                b"_NAME": b"cjson",
                b"_VERSION": b"2.1.0",
            }
        )

    def _cfg_args(self, args: Sequence[Any], most: int) -> list[Any]:
        if len(args) > most:
            self._argerror(most + 1, "found too many arguments")
        return list(args) + [None] * (most - len(args))

    def _cfg_int(
        self, cfg: _CJsonConfig, args: Sequence[Any], name: str, lo: int, hi: int = 2**31 - 1
    ) -> int:
        a = self._cfg_args(args, 1)
        if a[0] is not None:
            value = self._checkinteger(a, 1)
            if not lo <= value <= hi:
                self._argerror(1, f"expected integer between {lo} and {hi}")
            setattr(cfg, name, value)
        return int(getattr(cfg, name))

    def _enum(self, args: Sequence[Any], n: int, current: int, options: Sequence[bytes]) -> int:
        v = args[n - 1]
        if v is None:
            return current
        if type(v) is bool:
            return int(v)
        s = lua_tostring(v)
        if s is None:
            self._argerror(n, f"string expected, got {lua_type(v)}")
        if s not in options:
            self._argerror(n, f"invalid option '{s.decode('utf-8', 'replace')}'")
        return options.index(s)

    def _cfg_enum(
        self,
        cfg: _CJsonConfig,
        args: Sequence[Any],
        name: str,
        options: Sequence[bytes] = (b"off", b"on"),
    ) -> Any:
        a = self._cfg_args(args, 1)
        value = self._enum(a, 1, int(getattr(cfg, name)), options)
        setattr(cfg, name, value)
        return bool(value) if value in (0, 1) else options[value]

    def _cfg_sparse(self, cfg: _CJsonConfig, args: Sequence[Any]) -> tuple[Any, ...]:
        a = self._cfg_args(args, 3)
        cfg.encode_sparse_convert = self._enum(a, 1, cfg.encode_sparse_convert, (b"off", b"on"))
        for n, name in ((2, "encode_sparse_ratio"), (3, "encode_sparse_safe")):
            if a[n - 1] is not None:
                value = self._checkinteger(a, n)
                if not 0 <= value <= 2**31 - 1:
                    self._argerror(n, f"expected integer between 0 and {2**31 - 1}")
                setattr(cfg, name, value)
        return (bool(cfg.encode_sparse_convert), cfg.encode_sparse_ratio, cfg.encode_sparse_safe)

    def _json_encode(self, cfg: _CJsonConfig, args: Sequence[Any]) -> bytes:
        if len(args) != 1:
            self._argerror(1, "expected 1 argument")
        out: list[bytes] = []
        # Depth-first with an explicit stack (deep tables must not hit Python's recursion
        # limit); the work items run in the order the C encoder visits values, so the first
        # error raised is the same. An item is bytes (output), (value, depth) or, for an
        # object key checked when reached, (key, None).
        work: list[Any] = [(args[0], 0)]
        while work:
            item = work.pop()
            if type(item) is bytes:
                out.append(item)
                continue
            v, depth = item
            if depth is None:
                self._json_key(cfg, v, out)
                continue
            t = type(v)
            if t is bytes:
                out.append(_json_string(v))
            elif t is int or t is float:
                self._json_number(cfg, v, out)
            elif t is bool:
                out.append(b"true" if v else b"false")
            elif v is None or v is CJSON_NULL:
                out.append(b"null")
            elif lua_type(v) == "table":
                depth += 1
                if depth > cfg.encode_max_depth:
                    self._error(f"Cannot serialise, excessive nesting ({depth})")
                items = list(v.items())
                length = self._json_array_length(cfg, v, items)
                todo: list[Any] = []
                if length > 0:
                    by_index = items_by_index(items)
                    out.append(b"[")
                    for i in range(1, length + 1):
                        if i > 1:
                            todo.append(b",")
                        todo.append((by_index.get(i), depth))
                    todo.append(b"]")
                else:
                    out.append(b"{")
                    for n, (key, value) in enumerate(items):
                        if n:
                            todo.append(b",")
                        todo.append((key, None))
                        todo.append((value, depth))
                    todo.append(b"}")
                todo.reverse()
                work.extend(todo)
            else:
                self._json_fail(v, "type not supported")
        return b"".join(out)

    def _json_key(self, cfg: _CJsonConfig, key: Any, out: list[bytes]) -> None:
        tk = type(key)
        if tk is int or tk is float:
            out.append(b'"')
            self._json_number(cfg, key, out)
            out.append(b'":')
        elif tk is bytes:
            out.append(_json_string(key))
            out.append(b":")
        else:
            self._json_fail(key, "table key must be a number or string")

    def _json_fail(self, v: Any, reason: str) -> NoReturn:
        self._error(f"Cannot serialise {_json_typename(v)}: {reason}")

    def _json_number(self, cfg: _CJsonConfig, v: float, out: list[bytes]) -> None:
        if v != v or v in (math.inf, -math.inf):
            if cfg.encode_invalid_numbers == 0:
                self._json_fail(v, "must not be NaN or Inf")
            if cfg.encode_invalid_numbers == 2:
                out.append(b"null")
                return
            if v != v:
                out.append(b"nan")
                return
        out.append(b"%.*g" % (cfg.encode_number_precision, v))

    def _json_array_length(self, cfg: _CJsonConfig, v: Any, items: list[Any]) -> int:
        biggest = 0
        count = 0
        for key, _value in items:
            tk = type(key)
            if (tk is int or tk is float) and key >= 1 and math.floor(key) == key:
                biggest = max(biggest, int(key))
                count += 1
            else:
                return -1
        if (
            cfg.encode_sparse_ratio > 0
            and biggest > count * cfg.encode_sparse_ratio
            and biggest > cfg.encode_sparse_safe
        ):
            if not cfg.encode_sparse_convert:
                self._json_fail(v, "excessively sparse array")
            return -1
        return biggest

    def _json_decode(self, cfg: _CJsonConfig, args: Sequence[Any]) -> Any:
        if len(args) != 1:
            self._argerror(1, "expected 1 argument")
        data = self._checkstring(args, 1)
        if len(data) >= 2 and (data[0] == 0 or data[1] == 0):
            self._error("JSON parser does not support UTF-16 or UTF-32")
        parser = _JsonParser(data.split(b"\0", 1)[0], cfg, self._error)
        value = parser.value(parser.token())
        end = parser.token()
        if end[0] != _T_END:
            parser.fail("the end", end)
        return self._to_lua(value)

    def _to_lua(self, v: Any) -> Any:
        if type(v) is list or type(v) is dict:
            return self._lua.table_from(v, recursive=True)
        return v


class _CJsonConfig:
    __slots__ = (
        "decode_invalid_numbers",
        "decode_max_depth",
        "encode_invalid_numbers",
        "encode_keep_buffer",
        "encode_max_depth",
        "encode_number_precision",
        "encode_sparse_convert",
        "encode_sparse_ratio",
        "encode_sparse_safe",
    )

    def __init__(self) -> None:
        self.encode_sparse_convert = 0
        self.encode_sparse_ratio = 2
        self.encode_sparse_safe = 10
        self.encode_max_depth = 1000
        self.decode_max_depth = 1000
        self.encode_invalid_numbers = 0
        self.decode_invalid_numbers = 1
        self.encode_keep_buffer = 1
        self.encode_number_precision = 14


def _json_typename(v: Any) -> str:
    name = lua_type(v)
    if name == "userdata" and callable(v):
        return "function"  # the API functions are Python functions, C functions in Redis
    return name


_JSON_ESCAPES: Final = {
    **{i: b"\\u%04x" % i for i in range(32)},
    8: b"\\b",
    9: b"\\t",
    10: b"\\n",
    12: b"\\f",
    13: b"\\r",
    0x22: b'\\"',
    0x5C: b"\\\\",
    0x2F: b"\\/",
    0x7F: b"\\u007f",
}
_JSON_ESCAPE_RE = re.compile(rb'[\x00-\x1f"\\/\x7f]')


def _json_string(s: bytes) -> bytes:
    return b'"' + _JSON_ESCAPE_RE.sub(lambda m: _JSON_ESCAPES[m.group()[0]], s) + b'"'


(
    _T_OBJ_BEGIN,
    _T_OBJ_END,
    _T_ARR_BEGIN,
    _T_ARR_END,
    _T_STRING,
    _T_NUMBER,
    _T_BOOLEAN,
    _T_NULL,
    _T_COLON,
    _T_COMMA,
    _T_END,
    _T_WHITESPACE,
    _T_ERROR,
    _T_UNKNOWN,
) = range(14)
_TOKEN_NAMES: Final = (
    "T_OBJ_BEGIN",
    "T_OBJ_END",
    "T_ARR_BEGIN",
    "T_ARR_END",
    "T_STRING",
    "T_NUMBER",
    "T_BOOLEAN",
    "T_NULL",
    "T_COLON",
    "T_COMMA",
    "T_END",
    "T_WHITESPACE",
    "T_ERROR",
    "T_UNKNOWN",
)
_CH2TOKEN: list[int] = [_T_ERROR] * 256
for _c, _tok in (
    (b"{", _T_OBJ_BEGIN),
    (b"}", _T_OBJ_END),
    (b"[", _T_ARR_BEGIN),
    (b"]", _T_ARR_END),
    (b",", _T_COMMA),
    (b":", _T_COLON),
    (b"\0", _T_END),
    (b" ", _T_WHITESPACE),
    (b"\t", _T_WHITESPACE),
    (b"\n", _T_WHITESPACE),
    (b"\r", _T_WHITESPACE),
):
    _CH2TOKEN[_c[0]] = _tok
for _byte in b'"-+0123456789ftniIN':
    _CH2TOKEN[_byte] = _T_UNKNOWN
_ESCAPE2CHAR: Final = {
    0x22: 0x22,
    0x5C: 0x5C,
    0x2F: 0x2F,
    0x62: 0x08,
    0x66: 0x0C,
    0x6E: 0x0A,
    0x72: 0x0D,
    0x74: 0x09,
    0x75: 0x75,
}
# What strtod reads from a JSON number token (decimal, hex, inf/infinity, nan).
_STRTOD_RE = re.compile(
    rb"[+-]?(?:0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?"
    rb"|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?)",
    re.IGNORECASE,
)

_Token = tuple[int, Any, int]  # (type, value, index)


class _JsonParser:
    __slots__ = ("cfg", "data", "depth", "error", "index")

    def __init__(self, data: bytes, cfg: _CJsonConfig, error: LuaError) -> None:
        self.data = data
        self.index = 0
        self.cfg = cfg
        self.error = error
        self.depth = 0

    def fail(self, expected: str, token: _Token) -> NoReturn:
        found = token[1] if token[0] == _T_ERROR else _TOKEN_NAMES[token[0]]
        self.error(f"Expected {expected} but found {found} at character {token[2] + 1}")

    def _char(self, i: int) -> int:
        return self.data[i] if i < len(self.data) else 0

    def token(self) -> _Token:
        data = self.data
        i = self.index
        t = _CH2TOKEN[self._char(i)]
        while t == _T_WHITESPACE:
            i += 1
            t = _CH2TOKEN[self._char(i)]
        self.index = i
        if t == _T_ERROR:
            return (_T_ERROR, "invalid token", i)
        if t == _T_END:
            return (_T_END, None, i)
        if t != _T_UNKNOWN:
            self.index = i + 1
            return (t, None, i)
        ch = data[i]
        if ch == 0x22:
            return self._string(i)
        if ch == 0x2D or 0x30 <= ch <= 0x39:
            if not self.cfg.decode_invalid_numbers and self._invalid_number(i):
                return (_T_ERROR, "invalid number", i)
            return self._number(i)
        if data.startswith(b"true", i):
            self.index = i + 4
            return (_T_BOOLEAN, True, i)
        if data.startswith(b"false", i):
            self.index = i + 5
            return (_T_BOOLEAN, False, i)
        if data.startswith(b"null", i):
            self.index = i + 4
            return (_T_NULL, None, i)
        if self.cfg.decode_invalid_numbers and self._invalid_number(i):
            return self._number(i)
        return (_T_ERROR, "invalid token", i)

    def _invalid_number(self, i: int) -> bool:
        c = self._char(i)
        if c == 0x2B:
            return True
        if c == 0x2D:
            i += 1
            c = self._char(i)
        if c == 0x30:
            c2 = self._char(i + 1)
            return (c2 | 0x20) == 0x78 or 0x30 <= c2 <= 0x39
        if c <= 0x39:
            return False
        head = self.data[i : i + 3].lower()
        return head in (b"inf", b"nan")

    def _number(self, i: int) -> _Token:
        m = _STRTOD_RE.match(self.data, i)
        if m is None:
            return (_T_ERROR, "invalid number", i)
        text = m.group()
        self.index = m.end()
        body = text.lstrip(b"+-").lower()
        if body.startswith(b"0x"):
            value = float.fromhex(text.decode())
        elif body.startswith(b"nan"):
            value = math.nan
        else:
            value = float(text)
        return (_T_NUMBER, value, i)

    def _string(self, start: int) -> _Token:
        i = start + 1
        out = bytearray()
        while True:
            ch = self._char(i)
            if ch == 0x22:
                break
            if ch == 0:
                self.index = i
                return (_T_ERROR, "unexpected end of string", i)
            if ch == 0x5C:
                esc = _ESCAPE2CHAR.get(self._char(i + 1), 0)
                if esc == 0x75:
                    n = self._unicode_escape(i, out)
                    if n < 0:
                        self.index = i
                        return (_T_ERROR, "invalid unicode escape code", i)
                    i += n
                    continue
                if not esc:
                    self.index = i
                    return (_T_ERROR, "invalid escape code", i)
                out.append(esc)
                i += 2
                continue
            out.append(ch)
            i += 1
        self.index = i + 1
        return (_T_STRING, bytes(out), start)

    def _hex4(self, i: int) -> int:
        digits = self.data[i : i + 4]
        if len(digits) < 4 or not all(c in b"0123456789abcdefABCDEF" for c in digits):
            return -1
        return int(digits, 16)

    def _unicode_escape(self, i: int, out: bytearray) -> int:
        cp = self._hex4(i + 2)
        if cp < 0:
            return -1
        length = 6
        if (cp & 0xF800) == 0xD800:
            if cp & 0x400:
                return -1
            if self._char(i + 6) != 0x5C or self._char(i + 7) != 0x75:
                return -1
            low = self._hex4(i + 8)
            if low < 0 or (low & 0xFC00) != 0xDC00:
                return -1
            cp = (((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000
            length = 12
        out += chr(cp).encode("utf-8", "surrogatepass")
        return length

    def value(self, token: _Token) -> Any:
        """Parse one value starting at ``token``; containers with an explicit stack, so that
        deep documents do not hit Python's recursion limit (the C parser recurses)."""
        # Frames: [container, key] (key is None for arrays).
        stack: list[list[Any]] = []
        while True:
            t = token[0]
            if t in (_T_STRING, _T_NUMBER, _T_BOOLEAN):
                v = token[1]
            elif t == _T_NULL:
                v = CJSON_NULL
            elif t == _T_OBJ_BEGIN:
                self._descend()
                token = self.token()
                if token[0] == _T_OBJ_END:
                    self.depth -= 1
                    v = {}
                else:
                    frame: list[Any] = [{}, self._key(token)]
                    stack.append(frame)
                    token = self.token()
                    continue
            elif t == _T_ARR_BEGIN:
                self._descend()
                token = self.token()
                if token[0] == _T_ARR_END:
                    self.depth -= 1
                    v = []
                else:
                    stack.append([[], None])
                    continue
            else:
                self.fail("value", token)
            # Attach v to the open containers, closing those that end here.
            while stack:
                container, key = stack[-1]
                token = self.token()
                if key is None:
                    container.append(v)
                    if token[0] == _T_ARR_END:
                        stack.pop()
                        self.depth -= 1
                        v = container
                        continue
                    if token[0] != _T_COMMA:
                        self.fail("comma or array end", token)
                    token = self.token()
                else:
                    container[key] = v
                    if token[0] == _T_OBJ_END:
                        stack.pop()
                        self.depth -= 1
                        v = container
                        continue
                    if token[0] != _T_COMMA:
                        self.fail("comma or object end", token)
                    stack[-1][1] = self._key(self.token())
                    token = self.token()
                break
            else:
                return v

    def _key(self, token: _Token) -> Any:
        # An object key and its colon.
        if token[0] != _T_STRING:
            self.fail("object key string", token)
        key = token[1]
        colon = self.token()
        if colon[0] != _T_COLON:
            self.fail("colon", colon)
        return key

    def _descend(self) -> None:
        self.depth += 1
        if self.depth > self.cfg.decode_max_depth:
            self.error(
                f"Found too many nested data structures ({self.depth}) at character {self.index}"
            )
