"""The bytecode pass that makes a Lua 5.1 chunk's tail calls plain calls."""

from __future__ import annotations

import lupa.lua51 as lua51
import pytest

from streamworker.engine.lua_bytecode import BytecodeError, without_tail_calls


def _dump(code: str) -> bytes:
    lua = lua51.LuaRuntime(encoding=None)
    dumped: bytes = lua.eval("function(c) return string.dump(loadstring(c, '=t')) end")(
        code.encode()
    )
    return dumped


def test_a_tail_call_keeps_its_callers_frame_after_the_pass() -> None:
    lua = lua51.LuaRuntime(encoding=None)
    code = "local function f() return debug.getinfo(2, 'l').currentline end\nreturn f()"
    load = lua.eval("function(s) return loadstring(s)() end")
    assert load(_dump(code)) == -1  # a tail call: the caller's frame is gone
    assert load(without_tail_calls(_dump(code))) == 2


def test_results_of_nested_functions_stay_the_same() -> None:
    lua = lua51.LuaRuntime(encoding=None)
    code = (
        "local function g(...) return ... end local function f() return g(1, nil, 3) end return f()"
    )
    load = lua.eval("function(s) return {n = select('#', loadstring(s)()), loadstring(s)()} end")
    got = load(without_tail_calls(_dump(code)))
    assert (got[b"n"], got[1], got[2], got[3]) == (3, 1, None, 3)


def test_a_dump_of_another_layout_is_refused() -> None:
    with pytest.raises(BytecodeError):
        without_tail_calls(b"return 1")
    with pytest.raises(BytecodeError):
        without_tail_calls(_dump("return 1") + b"x")
