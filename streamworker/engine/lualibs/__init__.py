"""The C libraries Redis 7.0 bundles into its Lua, reimplemented for :mod:`.scripting`.

``cjson`` (lua-cjson 2.1.0), ``bit`` (LuaBitOp), ``struct`` (Roberto Ierusalimschy's struct)
and ``cmsgpack`` (lua-cmsgpack 0.4.0), plus Redis's ``math.random`` generator and the Lua value
helpers the scripting runtime shares, one module each. Each library function is a Python function that lupa
exposes to Lua; it follows the C original's results and error texts (checked against
redis-server 7.0.15 by the differential tests). Errors are raised through the two callbacks a
:class:`Libraries` gets: ``lua_error(msg)`` (``luaL_error``: the caller's position is
prepended) and ``arg_error(n, extra)`` (``luaL_argerror``).
"""

from __future__ import annotations

from typing import Any

from streamworker.engine.lualibs.bit import Bit
from streamworker.engine.lualibs.cjson import CJSON_NULL, CJson
from streamworker.engine.lualibs.cmsgpack import CMsgpack
from streamworker.engine.lualibs.common import (
    ArgError,
    LuaError,
    lua_tonumber,
    lua_tostring,
    lua_typename,
)
from streamworker.engine.lualibs.rand48 import Rand48
from streamworker.engine.lualibs.struct import Struct

__all__ = [
    "CJSON_NULL",
    "Libraries",
    "Rand48",
    "lua_tonumber",
    "lua_tostring",
    "lua_typename",
]


class Libraries:
    """The four library tables for one Lua state (``cjson``'s configuration lives here)."""

    def __init__(self, lua: Any, lua_error: LuaError, arg_error: ArgError) -> None:
        self.cjson = CJson(lua, lua_error, arg_error).table()
        self.bit = Bit(lua, lua_error, arg_error).table()
        self.struct = Struct(lua, lua_error, arg_error).table()
        self.cmsgpack = CMsgpack(lua, lua_error, arg_error).table()
