"""Masking what the clock decides, identically in every column's reply.

Only these are masked (everything else must match byte for byte):

* ids generated from the clock (``*``, ``ms`` near now): any string leaf ``<ms>-<seq>`` whose
  ``ms`` is a plausible Unix-milliseconds timestamp (the programs' explicit ids are tiny);
* XPENDING's idle time (extended form), XINFO CONSUMERS ``idle``, XINFO STREAM FULL's
  delivery times and ``seen-time``;
* XINFO STREAM ``radix-tree-nodes`` (a rax internal);
* the order of unordered replies (SMEMBERS, KEYS..., SSCAN's members) is made canonical by
  sorting.
"""

from __future__ import annotations

import re

from tests.engine.differential.resp import Node, dump, map_items, masked, parse, with_children

# 2001-09-09 .. 2286-11-20 in ms: no explicit id of the programs is in that range.
_CLOCK_ID = re.compile(rb"^(1\d{12}|[2-9]\d{12})-\d+$")
_TS_ID = b"<ts-id>"

_UNORDERED = frozenset({b"smembers", b"sunion", b"sinter", b"sdiff", b"keys", b"hkeys", b"hvals"})


def normalize(argv: list[bytes], raw: bytes, queued: list[list[bytes]] | None = None) -> bytes:
    """``raw`` (the reply to ``argv``) with the clock-decided parts masked.

    ``queued`` are the commands an EXEC ran, to normalise its reply's elements one by one.
    """
    if raw.startswith(b"<"):  # a backend's own marker (fakeredis without a reply)
        return raw
    try:
        node = parse(raw)
    except (ValueError, IndexError):
        return raw
    return dump(normalize_node(argv, node, queued))


def normalize_node(argv: list[bytes], node: Node, queued: list[list[bytes]] | None = None) -> Node:
    node = _mask_clock_ids(node)
    if not argv:
        return node
    name = argv[0].lower()
    if name == b"exec" and queued is not None and node.is_aggregate:
        if len(node.children) == len(queued):
            kids = [normalize_node(q, c) for q, c in zip(queued, node.children, strict=True)]
            return with_children(node, kids)
        return node
    if name in _UNORDERED and node.is_aggregate:
        return with_children(node, sorted(node.children, key=dump))
    if name == b"sscan" and node.is_aggregate and len(node.children) == 2:
        # A set of strings is a hash table in Redis 7.0: its members come in dict order.
        members = node.children[1]
        if members.is_aggregate:
            members = with_children(members, sorted(members.children, key=dump))
        return with_children(node, [node.children[0], members])
    sub = argv[1].lower() if len(argv) > 1 else b""
    if name == b"xpending":
        return _xpending(node)
    if name == b"xinfo" and sub == b"consumers":
        return _each(node, lambda c: _mask_keys(c, {b"idle"}))
    if name == b"xinfo" and sub == b"stream":
        return _xinfo_stream(node)
    return node


def _mask_clock_ids(node: Node) -> Node:
    if node.is_aggregate:
        kids = [_mask_clock_ids(c) for c in node.children]
        if any(k is not c for k, c in zip(kids, node.children, strict=True)):
            return with_children(node, kids)
        return node
    if node.kind in (ord("$"), ord("+")) and _CLOCK_ID.match(node.text):
        return masked(node, _TS_ID)
    return node


def _each(node: Node, fn: object) -> Node:
    assert callable(fn)
    if not node.is_aggregate:
        return node
    return with_children(node, [fn(c) for c in node.children])


def _mask_keys(node: Node, keys: set[bytes], nested: dict[bytes, object] | None = None) -> Node:
    """Mask the values of ``keys`` in a map reply; apply ``nested[key]`` to other values."""
    if not node.is_aggregate:
        return node
    kids = list(node.children)
    for ki, vi in map_items(node):
        k = kids[ki]
        if k.is_aggregate:
            continue
        if k.text in keys:
            kids[vi] = masked(kids[vi])
        elif nested and k.text in nested:
            fn = nested[k.text]
            assert callable(fn)
            kids[vi] = fn(kids[vi])
    return with_children(node, kids)


def _mask_position(node: Node, index: int) -> Node:
    if not node.is_aggregate or len(node.children) <= index:
        return node
    kids = list(node.children)
    if not kids[index].is_aggregate:
        kids[index] = masked(kids[index])
    return with_children(node, kids)


def _xpending(node: Node) -> Node:
    # The extended form is an array of [id, consumer, idle, deliveries]; the summary form
    # starts with an integer and holds no clock values.
    if not node.is_aggregate or not node.children:
        return node
    if all(c.is_aggregate and len(c.children) == 4 for c in node.children):
        return _each(node, lambda c: _mask_position(c, 2))
    return node


def _xinfo_stream(node: Node) -> Node:
    def group(g: Node) -> Node:
        return _mask_keys(
            g,
            set(),
            {
                b"pending": lambda p: _each(p, lambda e: _mask_position(e, 2)),
                b"consumers": lambda cs: _each(cs, consumer),
            },
        )

    def consumer(c: Node) -> Node:
        return _mask_keys(
            c,
            {b"seen-time"},
            {b"pending": lambda p: _each(p, lambda e: _mask_position(e, 1))},
        )

    return _mask_keys(
        node,
        {b"radix-tree-nodes"},
        {b"groups": lambda gs: _each(gs, group) if gs.is_aggregate else gs},
    )
