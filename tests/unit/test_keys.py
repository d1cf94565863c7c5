"""Derived key names and hash tags."""

from __future__ import annotations

from streamworker.io.keys import dead_letter_stream, hash_tag


def test_dead_letter_stream_tags_a_plain_stream() -> None:
    assert dead_letter_stream("orders") == "{orders}:dlq"


def test_dead_letter_stream_keeps_an_existing_tag() -> None:
    assert dead_letter_stream("{shop}:orders") == "{shop}:orders:dlq"


def test_hash_tag_rules_follow_redis_cluster() -> None:
    assert hash_tag("{a}:b") == "a"
    assert hash_tag("x{a}y{b}") == "a"
    assert hash_tag("{}a") is None  # an empty tag hashes the whole key
    assert hash_tag("a{b") is None
    assert hash_tag("plain") is None
