"""The engine keeps its inner rules: no module takes another's private names, and every module
has a place in the engine's import-linter layers (``lint-imports`` checks the layers
themselves; a module left out of them would be checked by nothing).

Offline and fast: the sources are parsed from the checkout, nothing is imported.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "streamworker" / "engine"
ENGINE_CONTRACT = "Engine layers"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def private_uses(source: str, module: str, is_package: bool) -> Iterator[str]:
    """Every place where ``source`` (the text of engine module ``module``) reaches into
    another engine module's private names: ``from x import _name``, an import of a private
    module from outside the package that holds it, or ``alias._name`` on a module imported
    under ``alias``. A package's own private modules are its business."""
    package = module if is_package else module.rpartition(".")[0]
    modules: dict[str, str] = {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not node.module.startswith("streamworker.engine"):
                continue
            parts = node.module.split(".")
            for i, part in enumerate(parts):
                if _private(part) and ".".join(parts[:i]) != package:
                    yield f"line {node.lineno}: imports private module {node.module}"
            for alias in node.names:
                if _private(alias.name) and node.module != package:
                    yield f"line {node.lineno}: from {node.module} import {alias.name}"
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("streamworker.engine") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ):
            yield f"line {node.lineno}: {node.value.id}.{node.attr}"


def test_no_engine_module_uses_another_modules_private_names() -> None:
    problems = []
    for path in sorted(ENGINE.rglob("*.py")):
        module = _module_name(path)
        for use in private_uses(path.read_text(), module, path.name == "__init__.py"):
            problems.append(f"{path.relative_to(ROOT)}: {use}")
    assert not problems, "\n".join(problems)


def test_the_private_name_check_finds_each_way_of_reaching_in() -> None:
    source = (
        "from streamworker.engine.commands.zsets import _zadd\n"
        "from streamworker.engine.commands import streams as s7\n"
        "from streamworker.engine.commands._args import to_int\n"
        "x = s7._text(b'')\n"
    )
    found = list(private_uses(source, "streamworker.engine.core", is_package=False))
    assert found == [
        "line 1: from streamworker.engine.commands.zsets import _zadd",
        "line 3: imports private module streamworker.engine.commands._args",
        "line 4: s7._text",
    ]


def test_a_package_may_use_its_own_private_modules() -> None:
    source = "from streamworker.engine.commands._args import to_int\n"
    assert not list(private_uses(source, "streamworker.engine.commands.keys", is_package=False))


def _engine_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"].startswith(ENGINE_CONTRACT)]
    names = []
    for layer in contract["layers"]:
        names += [n.strip() for n in layer.replace(":", "|").split("|")]
    return [f"streamworker.engine.{n}" for n in names]


def test_every_engine_module_has_a_place_in_the_engine_layers() -> None:
    layers = _engine_layers()
    unplaced = []
    for path in sorted(ENGINE.rglob("*.py")):
        module = _module_name(path)
        # The engine package itself (where the layers are plugged together) and plain
        # package markers (engine.rdb) hold no code a layer would have to own.
        if path.name == "__init__.py" and (module == "streamworker.engine" or not _has_code(path)):
            continue
        if not any(module == layer or module.startswith(layer + ".") for layer in layers):
            unplaced.append(module)
    assert not unplaced, f"not in any layer of the engine contract: {unplaced}"


def _has_code(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return any(
        not isinstance(node, ast.ImportFrom | ast.Import)
        and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        for node in body
    )
