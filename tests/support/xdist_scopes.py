"""How ``pytest -n N --dist loadgroup`` shares the tests out (pytest-xdist), decided from what
each test really uses rather than from its node id.

pytest-xdist 3.8 tells its controller a test's ``xdist_group`` by appending ``@group`` to the
node id on the worker; pytest 9.2 builds node ids from their parts and ignores that rewrite, so
the groups are lost (pytest-xdist#1386). This plugin replaces the side channel: each worker,
once it has collected, writes one JSON object (node id -> unit of work) into a directory that the
controller named in its ``workerinput``; the controller's scheduler reads it and hands each unit
to one worker whole. A unit is

- ``group:NAME`` for the tests of one costly shared server (:func:`group_of`: one Spark JVM,
  one 3-master cluster), so each starts once;
- the module's node id for a test that uses a module-, class- or package-scoped fixture, so
  that fixture is not built on two workers;
- the test's own node id otherwise: the finest split, which balances best.

The largest units are handed out first, then the rest, the tests marked ``slow`` before the others,
one unit at a time to whichever worker runs low. Without ``-n`` (or with another ``--dist``) nothing changes.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

_DIR_KEY = "streamworker_scopes_dir"
_WIDE_SCOPES = {"module", "class", "package"}
_dir = pytest.StashKey[str]()


def group_of(item: pytest.Item) -> str | None:
    """The costly shared server a test needs, if any: one JVM, one 3-master cluster."""
    fixtures = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    if "spark" in fixtures:
        return "spark"
    # A backend parameter "cluster" (alone or in a tuple) asks for the cluster at setup.
    if "redis_cluster" in fixtures or any(_names_cluster(p) for p in params):
        return "cluster"
    return None


def _names_cluster(param: object) -> bool:
    return param == "cluster" or (isinstance(param, tuple) and "cluster" in param)


def unit_of(item: pytest.Item) -> str:
    """The unit of work ``item`` belongs to (see the module's docstring)."""
    group = group_of(item)
    if group is not None:
        return f"group:{group}"
    fixtureinfo = getattr(item, "_fixtureinfo", None)
    defs = fixtureinfo.name2fixturedefs.values() if fixtureinfo is not None else ()
    if any(d and d[-1].scope in _WIDE_SCOPES for d in defs):
        return item.nodeid.split("::", 1)[0]
    return item.nodeid


def _loadgroup(config: pytest.Config) -> bool:
    return bool(
        config.getoption("dist", None) == "loadgroup" and config.getoption("numprocesses", None)
    )


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None and _loadgroup(config):
        config.stash[_dir] = tempfile.mkdtemp(prefix="sw-xdist-scopes-")


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_dir, None)
    if path is not None:
        for f in Path(path).iterdir():
            f.unlink()
        Path(path).rmdir()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    path = node.config.stash.get(_dir, None)
    if path is not None:
        node.workerinput[_DIR_KEY] = path


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or _DIR_KEY not in workerinput:
        return
    # The long ones first (stable: otherwise in collection order), so that the run does not end
    # waiting on a Spark driver that the last free worker picked up.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    units = {item.nodeid: unit_of(item) for item in items}
    final = Path(workerinput[_DIR_KEY]) / f"{workerinput['workerid']}.json"
    partial = final.with_suffix(".tmp")
    partial.write_text(json.dumps(units), encoding="utf-8")
    os.replace(partial, final)  # whole before the controller hears "collection finished"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    path = config.stash.get(_dir, None)
    if path is None:
        return None
    scopes_dir = Path(path)
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """LoadScope with the units the workers wrote (a node id missing falls back to itself)."""

        units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.units is None:
                files = sorted(scopes_dir.glob("*.json"))
                self.units = json.loads(files[0].read_text(encoding="utf-8")) if files else {}
            return self.units.get(nodeid, nodeid)

    return UnitScheduling(config, log)
