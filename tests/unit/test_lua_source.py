"""The loader of ``streamworker/lua/`` (``io/luasource.py``): includes of ``lua/lib/`` fragments
put in, the mistakes an include can make refused at load time, every script composed."""

from __future__ import annotations

from importlib import resources

import lupa.lua51 as lua51
import pytest

from streamworker.io.luasource import LuaSourceError, compose, lua_source, script_names

FRAGMENTS = {
    "double": "local function double(x)\n  return 2 * x\nend\n",
    "half": "local function half(x)\n  return x / 2\nend",
}


def _compose(text: str, fragments: dict[str, str] | None = None) -> str:
    return compose("s", text, (fragments or FRAGMENTS).get)


def _lib() -> list[str]:
    lib = resources.files("streamworker.lua").joinpath("lib")
    return sorted(p.name.removesuffix(".lua") for p in lib.iterdir() if p.name.endswith(".lua"))


def test_an_include_line_is_replaced_by_the_fragment() -> None:
    text = "-- s.lua\n\n--!include double\n--!include half\n\nreturn double(half(3))\n"
    assert _compose(text) == (
        "-- s.lua\n\n"
        "local function double(x)\n  return 2 * x\nend\n"
        "local function half(x)\n  return x / 2\nend\n"
        "\nreturn double(half(3))\n"
    )


def test_a_script_without_includes_is_unchanged() -> None:
    text = "-- a comment that names --!include in passing\nreturn redis.call('GET', KEYS[1])"
    assert _compose(text) == text


def test_an_unknown_fragment_is_an_error_that_names_it() -> None:
    with pytest.raises(
        LuaSourceError, match=r"lua/s\.lua, line 2: .*'triple'.*lua/lib/triple\.lua"
    ):
        _compose("local x = 1\n--!include triple\nreturn x\n")


def test_a_fragment_is_included_at_most_once() -> None:
    with pytest.raises(LuaSourceError, match="'double' a second time"):
        _compose("--!include double\n--!include double\n")


@pytest.mark.parametrize(
    "line", ["--!include", "--!include Double", "--!include double half", "  --!include double"]
)
def test_a_malformed_include_is_an_error(line: str) -> None:
    with pytest.raises(LuaSourceError, match="is not an include"):
        _compose(f"{line}\nreturn 1\n")


def test_a_fragment_includes_nothing() -> None:
    fragments = {"outer": "--!include inner\nlocal function outer() end\n", "inner": ""}
    with pytest.raises(LuaSourceError, match="fragments include nothing"):
        _compose("--!include outer\n", fragments)


def test_a_script_of_the_package_without_includes_is_sent_as_it_is_written() -> None:
    written = resources.files("streamworker.lua").joinpath("take_permits.lua").read_text("utf-8")
    assert "--!include" not in written
    assert lua_source("take_permits") == written


@pytest.mark.parametrize("name", script_names())
def test_every_script_composes_and_compiles(name: str) -> None:
    source = lua_source(name)
    assert "--!include" not in source
    compiled = lua51.LuaRuntime().eval("function(s) local f, err = loadstring(s) return err end")
    assert compiled(source) is None


def test_the_scripts_are_the_top_level_files_only() -> None:
    names = script_names()
    assert "apply_effects" in names
    assert not set(names) & set(_lib())


@pytest.mark.parametrize("name", _lib())
def test_every_fragment_defines_its_function_and_is_included(name: str) -> None:
    text = (
        resources.files("streamworker.lua")
        .joinpath("lib")
        .joinpath(f"{name}.lua")
        .read_text("utf-8")
    )
    assert f"\nlocal function {name}(" in text
    assert any(f"--!include {name}\n" in _written(script) for script in script_names())


def _written(script: str) -> str:
    return resources.files("streamworker.lua").joinpath(f"{script}.lua").read_text("utf-8")
