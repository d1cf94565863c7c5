"""Build the two zips ``spark-submit --py-files`` ships to the executors for this pipeline:

* ``streamworker.zip``: the ``streamworker`` package (pure Python, with its Lua scripts);
* ``shop_app.zip``: ``examples.spark_pipeline.app`` (the handler and its model), importable by
  that name.

    python examples/spark_pipeline/package.py dist

The executors' Python still needs streamworker's dependencies (redis, hiredis, pydantic,
SQLAlchemy, pyarrow, …): ``pip install 'streamworker[spark]'`` there, or ship a packed
environment (docs/spark.md, "Running on a cluster").
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _add_tree(archive: zipfile.ZipFile, root: Path, package: str) -> None:
    for path in sorted((root / package).rglob("*")):
        if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo") or path.is_dir():
            continue
        archive.write(path, path.relative_to(root).as_posix())


def build(out: Path) -> list[Path]:
    """Write both zips into ``out``; return their paths (streamworker's first)."""
    out.mkdir(parents=True, exist_ok=True)
    package = out / "streamworker.zip"
    with zipfile.ZipFile(package, "w", zipfile.ZIP_DEFLATED) as archive:
        _add_tree(archive, ROOT, "streamworker")
    app = out / "shop_app.zip"
    with zipfile.ZipFile(app, "w", zipfile.ZIP_DEFLATED) as archive:
        # zipimport needs regular packages: the repository's examples/ has no __init__.py.
        archive.writestr("examples/__init__.py", "")
        archive.writestr("examples/spark_pipeline/__init__.py", "")
        archive.write(ROOT / "examples/spark_pipeline/app.py", "examples/spark_pipeline/app.py")
    return [package, app]


if __name__ == "__main__":
    for built in build(Path(sys.argv[1] if len(sys.argv) > 1 else "dist")):
        print(built)
