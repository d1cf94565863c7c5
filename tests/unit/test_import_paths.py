"""The import paths the docs named before the tree was regrouped (#35) still give the same
objects as their new homes, so users' code keeps working."""

from __future__ import annotations

import importlib

import pytest

# (old path, new home, a name the docs or examples use from it)
MOVED = [
    ("streamworker.admin", "streamworker.ops.pending", "pending_report"),
    ("streamworker.admin", "streamworker.ops.dead_letters", "replay_dead_letters"),
    ("streamworker.codec", "streamworker.core.codec", "encode_body"),
    ("streamworker.codec", "streamworker.core.codec", "encode_fields"),
    ("streamworker.keys", "streamworker.io.keys", "in_stream_slot"),
    ("streamworker.partitions", "streamworker.producing.partitions", "PartitionedProducer"),
    ("streamworker.partitions", "streamworker.producing.partitions", "PartitionedStream"),
    ("streamworker.redisio", "streamworker.io.redisio", "open_redis"),
    ("streamworker.idempotency.outbox", "streamworker.idempotency.sql.outbox", "publish"),
    ("streamworker.idempotency.sql_migrate", "streamworker.idempotency.sql.migrate", "upgrade"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_an_old_documented_path_gives_the_object_of_its_new_home(
    old: str, new: str, name: str
) -> None:
    assert getattr(importlib.import_module(old), name) is getattr(
        importlib.import_module(new), name
    )


def test_the_public_names_of_the_package_are_unchanged() -> None:
    import streamworker

    assert set(streamworker.__all__) >= {
        "App",
        "Message",
        "Depends",
        "Retry",
        "DeadLetter",
        "Effects",
        "Producer",
        "SyncProducer",
        "Receipt",
        "StreamOptions",
        "Settings",
        "StreamworkerError",
        "ConnectionLost",
    }
    for name in streamworker.__all__:
        assert getattr(streamworker, name) is not None
