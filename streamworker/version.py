"""The version of streamworker (the package metadata's, kept in step by a unit test)."""

from __future__ import annotations

__version__ = "0.1.0"
