"""The version the code reports is the one the package is published with."""

from __future__ import annotations

import tomllib
from pathlib import Path

import streamworker
from streamworker.version import __version__


def test_the_reported_version_is_the_one_in_pyproject() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert __version__ == pyproject["project"]["version"]
    assert streamworker.__version__ == __version__
