"""``python -m benchmarks``: run every ``benchmarks/*_bench.py`` module's ``main()`` in turn."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks


def main() -> int:
    status = 0
    for info in sorted(pkgutil.iter_modules(benchmarks.__path__), key=lambda i: i.name):
        if info.name.endswith("_bench"):
            print(f"== benchmarks.{info.name}", flush=True)
            status |= int(importlib.import_module(f"benchmarks.{info.name}").main([]) or 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
