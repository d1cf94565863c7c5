"""SLOWLOG GET/LEN/RESET/HELP and LATENCY LATEST/HISTORY/RESET/DOCTOR/GRAPH/HISTOGRAM/HELP.

The data is kept by :class:`streamworker.engine.diagnostics.Diagnostics` (slow log, latency
events) and on the command specs (the per-command duration buckets of LATENCY HISTOGRAM).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import CommandSpec, command
from streamworker.engine.commands._args import to_str
from streamworker.engine.errors import CommandError
from streamworker.engine.numbers import parse_int
from streamworker.engine.replies import OK, Map, Status, Verbatim

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.diagnostics import LatencyEvent
    from streamworker.engine.replies import Reply

_ADMIN = ("admin", "loading", "stale")
_LATENCY = ("admin", "noscript", "loading", "stale")

_SLOWLOG_HELP = (
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
)

_LATENCY_HELP = (
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the "
    "specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Prints this help.",
)

_COUNT_RANGE = "ERR count should be greater than or equal to -1"


# --- SLOWLOG ---------------------------------------------------------------------------------


@command("slowlog|get", arity=-2, flags=_ADMIN)
def slowlog_get(ctx: Ctx, args: list[bytes]) -> Reply:
    """SLOWLOG GET [count] -> the newest ``count`` entries (10 by default, -1 all), each
    ``[id, unix time, microseconds, args, client addr, client name]``."""
    if len(args) > 1:
        raise CommandError(msgs.unknown_subcommand_or_arity(to_str(ctx.argv[1]), "SLOWLOG"))
    count = 10
    log = ctx.engine.diagnostics.slowlog
    if args:
        n = parse_int(args[0])
        if n is None or n < -1:
            raise CommandError(_COUNT_RANGE)
        count = len(log) if n == -1 else n
    out: list[Reply] = []
    for entry in log:
        if len(out) >= count:
            break
        out.append(
            [
                entry.id,
                entry.time_s,
                entry.duration_us,
                list(entry.args),
                entry.addr.encode(),
                entry.name,
            ]
        )
    return out


@command("slowlog|len", arity=2, flags=_ADMIN)
def slowlog_len(ctx: Ctx, args: list[bytes]) -> Reply:
    """SLOWLOG LEN -> number of entries."""
    return len(ctx.engine.diagnostics.slowlog)


@command("slowlog|reset", arity=2, flags=_ADMIN)
def slowlog_reset(ctx: Ctx, args: list[bytes]) -> Reply:
    """SLOWLOG RESET -> OK; empties the log (entry ids keep counting)."""
    ctx.engine.diagnostics.slowlog.clear()
    return OK


@command("slowlog|help", arity=2, flags=("loading", "stale"))
def slowlog_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """SLOWLOG HELP -> help lines."""
    return [Status(line) for line in _SLOWLOG_HELP]


# --- LATENCY ---------------------------------------------------------------------------------


@command("latency|latest", arity=2, flags=_LATENCY)
def latency_latest(ctx: Ctx, args: list[bytes]) -> Reply:
    """LATENCY LATEST -> ``[event, unix time, latest ms, max ms]`` per event."""
    out: list[Reply] = []
    for name, event in ctx.engine.diagnostics.events.items():
        when, ms = event.samples[-1]
        out.append([name.encode(), when, ms, event.max_ms])
    return out


@command("latency|history", arity=3, flags=_LATENCY)
def latency_history(ctx: Ctx, args: list[bytes]) -> Reply:
    """LATENCY HISTORY event -> ``[unix time, ms]`` samples, oldest first (empty for an
    unknown event)."""
    event = ctx.engine.diagnostics.events.get(to_str(args[0]))
    if event is None:
        return []
    return [[when, ms] for when, ms in event.samples]


@command("latency|reset", arity=-2, flags=_LATENCY)
def latency_reset(ctx: Ctx, args: list[bytes]) -> Reply:
    """LATENCY RESET [event ...] -> how many events were reset (all without arguments)."""
    return ctx.engine.diagnostics.reset_latency([to_str(a) for a in args])


@command("latency|graph", arity=3, flags=_LATENCY)
def latency_graph(ctx: Ctx, args: list[bytes]) -> Reply:
    """LATENCY GRAPH event -> an ASCII chart of the event's samples (verbatim text)."""
    name = to_str(args[0])
    event = ctx.engine.diagnostics.events.get(name)
    if event is None:
        raise CommandError(f"ERR No samples available for event '{name}'")
    return Verbatim(_graph(name, event, int(time.time())))


_GRAPH_ROWS = 4


def _graph(name: str, event: LatencyEvent, now_s: int) -> str:
    # One column per sample (newest right), bars scaled between the lowest and highest
    # sample, and under each column the sample's age (s/m/h/d) written top to bottom.
    samples = list(event.samples)
    values = [ms for _, ms in samples]
    high, low = max(values), min(values)
    lines = [
        f"{name} - high {high} ms, low {low} ms (all time high {event.max_ms} ms)",
        "-" * 80,
    ]
    span = max(1, high - low)
    heights = [1 + (v - low) * (_GRAPH_ROWS - 1) // span for v in values]
    for row in range(_GRAPH_ROWS, 0, -1):
        lines.append("".join("#" if h >= row else " " for h in heights).rstrip() or "")
    ages = [_age(now_s - when) for when, _ in samples]
    width = max(len(a) for a in ages)
    lines.append("")
    for i in range(width):
        lines.append("".join(a[i] if i < len(a) else " " for a in ages).rstrip())
    return "\n".join(lines) + "\n"


def _age(seconds: int) -> str:
    seconds = max(0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@command("latency|doctor", arity=2, flags=_LATENCY)
def latency_doctor(ctx: Ctx, args: list[bytes]) -> Reply:
    """LATENCY DOCTOR -> a report on the recorded events (verbatim text)."""
    diag = ctx.engine.diagnostics
    threshold = ctx.engine.config.get("latency-monitor-threshold")
    if not diag.events:
        if threshold == "0":
            text = (
                "The latency monitor is off (latency-monitor-threshold 0): set it to a number "
                "of milliseconds to record the events that take at least that long.\n"
            )
        else:
            text = f"No event took {threshold} ms or more since the last reset.\n"
        return Verbatim(text)
    lines = [f"Events that took at least {threshold} ms:", ""]
    for i, (name, event) in enumerate(diag.events.items(), 1):
        values = [ms for _, ms in event.samples]
        avg = sum(values) // len(values)
        first = event.samples[0][0]
        span = max(1, event.samples[-1][0] - first)
        lines.append(
            f"{i}. {name}: {len(values)} latency spikes (average {avg}ms, mean deviation "
            f"{sum(abs(v - avg) for v in values) // len(values)}ms, period "
            f"{span / len(values):.2f} sec). Worst all time event {event.max_ms}ms."
        )
    lines.append("")
    if any(name in ("command", "fast-command") for name in diag.events):
        lines.append(
            "Slow commands: check SLOWLOG GET and INFO commandstats for the commands that "
            "take long; large values and O(N) commands (KEYS, SMEMBERS, LRANGE 0 -1 ...) are "
            "the usual cause."
        )
    if "expire-cycle" in diag.events:
        lines.append("Key expiry took long: many keys expire at the same time.")
    if any(name.startswith("eviction") for name in diag.events):
        lines.append("Eviction took long: the dataset is often over maxmemory.")
    return Verbatim("\n".join(lines) + "\n")


def _histogram_entry(spec: CommandSpec) -> tuple[bytes, Map]:
    buckets: list[tuple[int, int]] = []
    seen = 0
    for i, count in enumerate(spec.histogram):
        if count:
            seen += count
            buckets.append(((1024 << i) // 1000, seen))
    return spec.name.encode(), Map([(b"calls", spec.calls), (b"histogram_usec", Map(buckets))])


@command("latency|histogram", arity=-2, flags=_LATENCY)
def latency_histogram(ctx: Ctx, args: list[bytes]) -> Reply:
    """LATENCY HISTOGRAM [command ...] -> per called command (a container's subcommands for a
    container's name; unknown names skipped): ``calls`` and the cumulative counts of its
    power-of-two duration buckets (``histogram_usec``: upper bound in microseconds)."""
    table = ctx.engine.table
    specs: list[CommandSpec] = []
    if not args:
        for spec in table.values():
            specs.append(spec)
            specs.extend((spec.subcommands or {}).values())
    else:
        for arg in args:
            name = arg.lower()
            if b"|" in name:
                parent, _, sub = name.partition(b"|")
                container = table.get(parent)
                found = (container.subcommands or {}).get(sub) if container else None
                if found is not None and found not in specs:
                    specs.append(found)
                continue
            top = table.get(name)
            if top is None:
                continue
            for spec in (top, *(top.subcommands or {}).values()):
                if spec not in specs:
                    specs.append(spec)
    return Map(_histogram_entry(spec) for spec in specs if spec.calls)


@command("latency|help", arity=2, flags=("loading", "stale"))
def latency_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """LATENCY HELP -> help lines."""
    return [Status(line) for line in _LATENCY_HELP]
