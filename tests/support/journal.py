"""Line journals that test apps append to and tests read back, whole even across a SIGKILL.

A ``write(2)`` to a regular file is not atomic against SIGKILL: Linux copies it page by page and
stops between two pages when a fatal signal is pending, so a record that straddles a 4 KiB page
boundary of the file can be cut short with no newline. The next process appending to the same file
would then glue its first record to the torn one ("done 1-0 1453start 1-1 …"), or a torn number
("14" of "1453") would read as another record. So each record is written as one
``"\\n<fields> ."``: the leading newline starts it on a line of its own whatever came before, and
the closing ``.`` tells a whole record from a cut one. :func:`read_records` drops cut records,
which only a process killed in the middle of writing them leaves behind.
"""

from __future__ import annotations

import os
from pathlib import Path

END = "."
"""The last field of every whole record."""


def append_record(path: str | os.PathLike[str], line: str, *, fsync: bool = True) -> None:
    """Append ``line`` (space-separated fields) as one record; with ``fsync``, it survives a crash
    of the machine's page cache too (a SIGKILL right after the call never loses it)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"\n{line} {END}\n".encode())
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_records(path: Path) -> list[list[str]]:
    """The whole records of ``path``, each as its fields (without the end mark); [] if missing."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(errors="replace").splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[-1] == END:
            records.append(fields[:-1])
    return records
