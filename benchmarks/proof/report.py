"""Results of a proof run: the JSON schema, the issue's targets, the Markdown report, the chart.

Pure functions over the results dict (no servers, no peers), so the unit tests can check them on
a fixed input.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SCHEMA = "streamworker-proof/1"
EXACTLY_ONCE = ("sw-lua", "sw-sql-sqlite", "sw-sql-pg")
PEERS = ("taskiq", "streaq", "faststream", "rsq")

# key: (required, type or types)
_THROUGHPUT_KEYS = {
    "variant": str,
    "handler": str,
    "messages": int,
    "seconds": (float, int, type(None)),
    "rate": (float, int, type(None)),
}
_CRASH_KEYS = {"variant": str, "messages": int}
_LATENCY_KEYS = {"variant": str, "rate": int, "duration_s": (float, int)}


def percentile(sorted_values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile of an ascending sequence (None when empty)."""
    if not sorted_values:
        return None
    rank = math.ceil(pct / 100 * len(sorted_values))
    return float(sorted_values[min(max(rank, 1), len(sorted_values)) - 1])


def validate(results: dict[str, Any]) -> list[str]:
    """Problems with ``results`` against the schema (empty when it conforms)."""
    problems: list[str] = []
    if results.get("schema") != SCHEMA:
        problems.append(f"schema: expected {SCHEMA!r}, got {results.get('schema')!r}")
    if not isinstance(results.get("meta"), dict):
        problems.append("meta: missing or not an object")
    for section, keys in (
        ("throughput", _THROUGHPUT_KEYS),
        ("crash", _CRASH_KEYS),
        ("latency", _LATENCY_KEYS),
    ):
        rows = results.get(section)
        if not isinstance(rows, list):
            problems.append(f"{section}: missing or not a list")
            continue
        for i, row in enumerate(rows):
            for key, kind in keys.items():
                if key not in row:
                    problems.append(f"{section}[{i}]: missing {key!r}")
                elif not isinstance(row[key], kind) or isinstance(row[key], bool):
                    problems.append(f"{section}[{i}].{key}: wrong type {type(row[key]).__name__}")
    if not isinstance(results.get("guarantees"), dict):
        problems.append("guarantees: missing or not an object")
    return problems


def _rate(results: dict[str, Any], variant: str, handler: str = "noop") -> float | None:
    """The median rate of the variant's runs that did not fail (rounds are interleaved)."""
    rates = [
        float(row["rate"])
        for row in results.get("throughput", [])
        if row["variant"] == variant
        and row["handler"] == handler
        and not row.get("error")
        and row.get("rate") is not None
    ]
    return statistics.median(rates) if rates else None


def round_ratios(results: dict[str, Any], a: str, b: str) -> list[float]:
    """``a``'s rate over ``b``'s within each round in which both ran without error (the
    no-op rounds are interleaved, so these pairs ran under the same load)."""
    rates: dict[tuple[str, int], float] = {}
    for row in results.get("throughput", []):
        if row["handler"] == "noop" and not row.get("error") and row.get("rate"):
            rates[(row["variant"], int(row.get("round", 1)))] = float(row["rate"])
    rounds = sorted({r for _, r in rates})
    return [rates[(a, r)] / rates[(b, r)] for r in rounds if (a, r) in rates and (b, r) in rates]


def _latency(results: dict[str, Any], variant: str, rate: int) -> dict[str, Any] | None:
    for row in results.get("latency", []):
        if row["variant"] == variant and row["rate"] == rate and row.get("p99_ms") is not None:
            return dict(row)
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with its measured value, its threshold and whether it is met
    (``met`` is None when the run lacks the figures)."""
    out: list[dict[str, Any]] = []

    def add(key: str, text: str, value: float | None, threshold: float, higher: bool) -> None:
        met = None if value is None else (value >= threshold if higher else value <= threshold)
        out.append({"id": key, "target": text, "value": value, "threshold": threshold, "met": met})

    lua = _rate(results, "sw-lua")
    peer_rates = {p: _rate(results, p) for p in PEERS}
    measured = {p: r for p, r in peer_rates.items() if r is not None}
    best = max(measured.values()) if measured else None
    add(
        "lua_over_best_peer",
        "Lua exactly-once throughput above every peer's at-least-once (no-op handler)",
        _ratio(lua, best),
        1.0,
        True,
    )
    # Strictly above: a tie is not "above".
    if out[-1]["value"] is not None:
        out[-1]["met"] = out[-1]["value"] > 1.0
    # Between streamworker and the raw loop, rounds are interleaved: the median of the rounds'
    # ratios (pairs that ran under the same load) is the figure; the ratio of the medians is
    # shown beside it.
    for key, text, a, b, threshold in (
        ("lua_vs_none", "Lua exactly-once >= 85% of at-least-once", "sw-lua", "sw-none", 0.85),
        (
            "none_vs_raw_batched",
            "streamworker at-least-once >= 60% of the raw batched loop",
            "sw-none",
            "raw-batched",
            0.60,
        ),
    ):
        per_round = round_ratios(results, a, b)
        of_medians = _ratio(_rate(results, a), _rate(results, b))
        add(key, text, statistics.median(per_round) if per_round else of_medians, threshold, True)
        out[-1]["per_round"] = per_round
        out[-1]["ratio_of_medians"] = of_medians
    for variant in EXACTLY_ONCE:
        row = next((r for r in results.get("crash", []) if r["variant"] == variant), None)
        bad = None
        if row is not None and not row.get("error") and "duplicates" in row:
            bad = float(row["duplicates"] + row["lost"])
        add(
            f"crash_{variant}",
            f"{variant}: zero duplicates and zero losses after kill -9 at 50%",
            bad,
            0.0,
            False,
        )
    lua10 = _latency(results, "sw-lua", 10000)
    raw10 = _latency(results, "raw-block", 10000)
    add(
        "lua_p99_10k",
        "Lua exactly-once p99 <= 2 ms at 10,000 msg/s",
        lua10["p99_ms"] if lua10 else None,
        2.0,
        False,
    )
    add(
        "lua_p999_vs_raw_10k",
        "Lua exactly-once p99.9 within 1.5x of the raw loop's at 10,000 msg/s",
        _ratio(lua10["p999_ms"] if lua10 else None, raw10["p999_ms"] if raw10 else None),
        1.5,
        False,
    )
    return out


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown(results: dict[str, Any]) -> str:
    """The short report: tables of throughput, crash and latency, then the targets."""
    meta = results.get("meta", {})
    lines = [
        "# streamworker proof benchmarks",
        "",
        f"Run {meta.get('started', '?')} on {meta.get('machine', '?')} "
        f"(load average {meta.get('loadavg', '?')} at the start, "
        f"{meta.get('loadavg_end', '?')} at the end); command: `{meta.get('command', '?')}`.",
        "Ratios are between variants of this one run; absolute figures depend on the machine.",
        "",
        "## Throughput (pre-fill N, then drain; msgs/s)",
        "",
        "| variant | no-op | DB insert | guarantee |",
        "|---|---:|---:|---|",
    ]
    guarantees = results.get("guarantees", {})
    variants = list(dict.fromkeys(r["variant"] for r in results.get("throughput", [])))
    for v in variants:
        cells = []
        for handler in ("noop", "db"):
            rows = [
                r for r in results["throughput"] if r["variant"] == v and r["handler"] == handler
            ]
            rate = _rate(results, v, handler)
            if not rows:
                cells.append("—")
            elif rate is None:
                cells.append("failed")
            else:
                ok = [r for r in rows if not r.get("error")]
                runs = f" (median of {len(ok)})" if len(ok) > 1 else ""
                failed = f", {len(rows) - len(ok)} failed" if len(ok) < len(rows) else ""
                cells.append(_fmt(rate) + runs + failed)
        lines.append(f"| {v} | {cells[0]} | {cells[1]} | {guarantees.get(v, '')} |")
    counts = sorted({(r["handler"], r["messages"]) for r in results.get("throughput", [])})
    lines += [
        "",
        "Messages per run: " + ", ".join(f"{h} {n:,}" for h, n in counts) + ". "
        "DB insert: one INSERT per message into PostgreSQL (autocommit, fsync on) for the "
        "at-least-once variants; the SQL modes add the row to the batch's transaction (one "
        "commit per batch, with the processed markers); Lua mode applies one HINCRBY effect in "
        "Redis instead (its exactly-once scope), so its figure is not a SQL write.",
    ]
    lines += [
        "",
        "## Crash correctness (kill -9 at 50% of the drain, restart)",
        "",
        "| variant | messages | duplicates | lost | left pending | recovery s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results.get("crash", []):
        if r.get("error"):
            lines.append(
                f"| {r['variant']} | {r['messages']:,} | failed: {r['error'][:80]} | | | |"
            )
            continue
        lines.append(
            f"| {r['variant']} | {r['messages']:,} | {_fmt(r.get('duplicates'))} | "
            f"{_fmt(r.get('lost'))} | {_fmt(r.get('pending_left'))} | "
            f"{_fmt(r.get('recovery_s'), 1)} |"
        )
    lines += [
        "",
        "Duplicates: messages handled more than once (a durable per-message count: HINCRBY in "
        "the handler for at-least-once variants, the Lua effect, the SQL rows); lost: messages "
        "never handled by the end of the wait (left pending or never re-read).",
        "",
        "## Latency (produce-to-handle, two consumers blocked in XREADGROUP)",
        "",
        "| variant | rate msg/s | achieved | p50 ms | p99 ms | p99.9 ms | max ms | catch-up s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results.get("latency", []):
        if r.get("error") and r.get("p99_ms") is None:
            lines.append(
                f"| {r['variant']} | {r['rate']:,} | failed: {r['error'][:80]} | | | | | |"
            )
            continue
        lines.append(
            f"| {r['variant']} | {r['rate']:,} | {_fmt(r.get('achieved_rate'))} | "
            f"{_fmt(r.get('p50_ms'), 2)} | {_fmt(r.get('p99_ms'), 2)} | "
            f"{_fmt(r.get('p999_ms'), 2)} | {_fmt(r.get('max_ms'), 1)} | "
            f"{_fmt(r.get('catch_up_s'), 2)} |"
        )
    lines += [
        "",
        "## Targets",
        "",
        "| target | measured | threshold | met |",
        "|---|---:|---:|---|",
    ]
    for t in targets(results):
        if t["id"].startswith("crash_"):
            value, threshold = _fmt(t["value"]), "0"
        elif t["id"] == "lua_p99_10k":
            value, threshold = f"{_fmt(t['value'], 2)} ms", "2 ms"
        else:
            value = "—" if t["value"] is None else f"{t['value']:.2f}x"
            if len(t.get("per_round", [])) > 1:
                value += (
                    " (median of rounds: "
                    + ", ".join(f"{x:.2f}" for x in t["per_round"])
                    + f"; ratio of medians {t['ratio_of_medians']:.2f}x)"
                )
            threshold = f"{t['threshold']:.2f}x"
        met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
        lines.append(f"| {t['target']} | {value} | {threshold} | {met} |")
    for note in results.get("notes", []):
        lines += ["", note]
    return "\n".join(lines) + "\n"


def chart(results: dict[str, Any], path: Path) -> None:
    """Throughput (no-op and DB insert) and latency (p50/p99/p99.9) side by side, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
    variants = list(dict.fromkeys(r["variant"] for r in results.get("throughput", [])))
    width = 0.4
    for k, handler in enumerate(("noop", "db")):
        values = [(_rate(results, v, handler) or 0.0) for v in variants]
        xs = [i + (k - 0.5) * width for i in range(len(variants))]
        label = "no-op" if handler == "noop" else "DB insert (sw-lua: HINCRBY effect)"
        bars = ax1.bar(xs, values, width, label=label)
        ax1.bar_label(bars, labels=[f"{v / 1000:.1f}k" if v else "" for v in values], fontsize=7)
    ax1.set_xticks(range(len(variants)), variants, rotation=40, ha="right")
    if any(_rate(results, v, h) for v in variants for h in ("noop", "db")):
        ax1.set_yscale("log")
    ax1.set_ylabel("messages/s, log scale (higher is better)")
    ax1.set_title("Throughput: pre-fill N, then drain")
    ax1.legend()
    rows = [r for r in results.get("latency", []) if r.get("p99_ms") is not None]
    labels = [f"{r['variant']}\n{r['rate'] // 1000}k/s" for r in rows]
    w = 0.27
    for k, (key, name) in enumerate((("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))):
        xs = [i + (k - 1) * w for i in range(len(rows))]
        values = [r[key] or 0.0 for r in rows]
        bars = ax2.bar(xs, values, w, label=name)
        ax2.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize=7)
    ax2.set_xticks(range(len(rows)), labels)
    if rows:
        ax2.set_yscale("log")
    ax2.set_ylabel("produce-to-handle latency, ms (lower is better)")
    ax2.set_title("Latency: fixed-rate producer, two consumers")
    ax2.axhline(2.0, color="grey", linestyle="--", linewidth=1, label="2 ms")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
