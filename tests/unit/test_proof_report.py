"""The proof benchmark's report maths and JSON schema (benchmarks/proof), on a fixed input: no
servers, no peer frameworks, so the harness cannot rot silently between benchmark runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.proof import report
from benchmarks.proof.handlers import Handler, payload


def _tp(variant: str, rate: float | None, handler: str = "noop", **extra: Any) -> dict[str, Any]:
    seconds = None if rate is None else 10_000 / rate
    return {
        "variant": variant,
        "handler": handler,
        "messages": 10_000,
        "seconds": seconds,
        "rate": rate,
        **extra,
    }


def _crash(variant: str, dups: int, lost: int) -> dict[str, Any]:
    return {
        "variant": variant,
        "messages": 2000,
        "recorded_at_kill": 1000,
        "duplicates": dups,
        "lost": lost,
        "pending_left": lost,
        "recovery_s": 1.5,
        "drained": lost == 0,
        "handled_total": 2000 - lost + dups,
    }


def _lat(variant: str, rate: int, p99: float, p999: float) -> dict[str, Any]:
    return {
        "variant": variant,
        "rate": rate,
        "duration_s": 30.0,
        "produced": rate * 30,
        "achieved_rate": float(rate),
        "handled": rate * 30,
        "samples": rate * 29,
        "p50_ms": 0.5,
        "p99_ms": p99,
        "p999_ms": p999,
        "max_ms": p999 * 2,
        "catch_up_s": 0.02,
    }


RESULTS: dict[str, Any] = {
    "schema": report.SCHEMA,
    "meta": {"started": "2026-11-22 19:00:00 UTC", "machine": "test", "command": "x"},
    "guarantees": {"sw-lua": "exactly-once effects", "taskiq": "at-least-once"},
    "throughput": [
        _tp("raw-batched", 40_000.0),
        _tp("sw-none", 20_000.0),
        _tp("sw-lua", 18_000.0),
        _tp("taskiq", 700.0),
        _tp("streaq", 300.0),
        _tp("faststream", 600.0),
        _tp("rsq", 20_000.0, error="consumer exited"),  # a failed run is not a figure
        _tp("sw-none", 500.0, handler="db", written=3000),
    ],
    "crash": [
        _crash("sw-lua", 0, 0),
        _crash("sw-sql-sqlite", 0, 0),
        _crash("sw-sql-pg", 1, 0),
        _crash("faststream", 0, 98),
    ],
    "latency": [
        _lat("raw-block", 10_000, 1.0, 4.0),
        _lat("sw-lua", 10_000, 1.8, 7.0),
        _lat("sw-lua", 5_000, 1.2, 3.0),
    ],
    "notes": ["a note"],
}


def _by_id() -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in report.targets(RESULTS)}


def test_fixed_input_conforms_to_the_schema_and_survives_json() -> None:
    assert report.validate(RESULTS) == []
    assert report.validate(json.loads(json.dumps(RESULTS))) == []


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda r: r.update(schema="other/0"), "schema"),
        (lambda r: r.pop("latency"), "latency: missing"),
        (lambda r: r["throughput"][0].pop("rate"), "throughput[0]: missing 'rate'"),
        (lambda r: r["throughput"][0].update(messages="10"), "throughput[0].messages"),
        (lambda r: r["crash"][0].update(messages=True), "crash[0].messages"),
        (lambda r: r.pop("guarantees"), "guarantees"),
    ],
)
def test_validate_names_what_is_wrong(mutate: Any, problem: str) -> None:
    broken = copy.deepcopy(RESULTS)
    mutate(broken)
    problems = report.validate(broken)
    assert any(problem in p for p in problems), problems


def test_throughput_targets_are_ratios_of_the_same_run() -> None:
    t = _by_id()
    # Best peer that did not fail: taskiq at 700 (rsq's 20,000 was an error).
    assert t["lua_over_best_peer"]["value"] == pytest.approx(18_000 / 700)
    assert t["lua_over_best_peer"]["met"] is True
    assert t["lua_vs_none"]["value"] == pytest.approx(0.9)
    assert t["lua_vs_none"]["met"] is True
    assert t["none_vs_raw_batched"]["value"] == pytest.approx(0.5)
    assert t["none_vs_raw_batched"]["met"] is False


def test_a_tie_with_a_peer_is_not_above_it() -> None:
    tied = copy.deepcopy(RESULTS)
    tied["throughput"].append(_tp("streaq", 18_000.0))
    tied["throughput"] = [r for r in tied["throughput"] if r["rate"] != 300.0]
    t = {x["id"]: x for x in report.targets(tied)}
    assert t["lua_over_best_peer"]["value"] == pytest.approx(1.0)
    assert t["lua_over_best_peer"]["met"] is False


def test_crash_targets_count_duplicates_and_losses_of_exactly_once_modes_only() -> None:
    t = _by_id()
    assert t["crash_sw-lua"]["met"] is True
    assert t["crash_sw-sql-sqlite"]["met"] is True
    assert (t["crash_sw-sql-pg"]["value"], t["crash_sw-sql-pg"]["met"]) == (1.0, False)
    assert not any("faststream" in key for key in t)  # a peer's losses are reported, not targets


def test_latency_targets_use_the_10k_runs() -> None:
    t = _by_id()
    assert (t["lua_p99_10k"]["value"], t["lua_p99_10k"]["met"]) == (1.8, True)
    assert t["lua_p999_vs_raw_10k"]["value"] == pytest.approx(7.0 / 4.0)
    assert t["lua_p999_vs_raw_10k"]["met"] is False


def test_missing_figures_are_not_measured_rather_than_met() -> None:
    empty = {"schema": report.SCHEMA, "meta": {}, "guarantees": {}, "throughput": []}
    empty.update(crash=[], latency=[])
    assert {t["met"] for t in report.targets(empty)} == {None}


def test_markdown_shows_every_section_and_the_verdicts() -> None:
    text = report.markdown(RESULTS)
    for heading in ("## Throughput", "## Crash correctness", "## Latency", "## Targets"):
        assert heading in text
    assert "| sw-lua | 18,000 | — | exactly-once effects |" in text
    assert "| rsq | failed | — |" in text
    assert "| faststream | 2,000 | 0 | 98 | 98 | 1.5 |" in text
    assert "| Lua exactly-once >= 85% of at-least-once | 0.90x | 0.85x | yes |" in text
    assert "| 0.50x | 0.60x | **no** |" in text
    assert "| sw-lua | 10,000 | 10,000 | 0.50 | 1.80 | 7.00 | 14.0 | 0.02 |" in text
    assert "a note" in text


@pytest.mark.parametrize(
    ("pct", "expected"), [(50, 5.0), (99, 10.0), (99.9, 10.0), (10, 1.0), (0, 1.0)]
)
def test_percentile_is_nearest_rank(pct: float, expected: float) -> None:
    assert report.percentile([float(x) for x in range(1, 11)], pct) == expected


def test_percentile_of_nothing_is_none() -> None:
    assert report.percentile([], 99) is None


def test_latency_handler_writes_send_time_and_latency_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "lat.txt"
    monkeypatch.setenv("PROOF_LATENCY_FILE", str(out))
    handler = Handler("latency")
    sent = [payload(i) for i in range(3)]
    for p in sent:
        handler.sync_call({k.encode(): v.encode() for k, v in p.items()})  # as redis-py gives
    handler.dump()
    handler.dump()  # nothing left: does not write twice
    lines = [line.split() for line in out.read_text().splitlines()]
    assert [int(ts) for ts, _ in lines] == [int(p["ts"]) for p in sent]
    assert all(int(lat) >= 0 for _, lat in lines)


def test_an_unknown_handler_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown handler 'nope'"):
        Handler("nope")


def test_the_entry_point_is_discovered_and_its_options_parse() -> None:
    from benchmarks import proof_bench

    args = proof_bench._parser().parse_args(["--quick", "--latency-s", "2", "--only", "crash"])
    assert (args.quick, args.latency_s, args.only) == (True, 2.0, "crash")
    assert callable(proof_bench.main)


def test_rounds_report_the_median_of_the_runs_that_did_not_fail() -> None:
    rounds = copy.deepcopy(RESULTS)
    rounds["throughput"] += [
        {**_tp("sw-lua", 12_000.0), "round": 2},
        {**_tp("sw-lua", 30_000.0), "round": 3},
        {**_tp("sw-lua", 1.0, error="timed out"), "round": 4},
    ]
    t = {x["id"]: x for x in report.targets(rounds)}
    # sw-none ran in round 1 only: one pair, 18k / 20k; the median of sw-lua is 18k too.
    assert t["lua_vs_none"]["value"] == pytest.approx(0.9)
    assert t["lua_vs_none"]["ratio_of_medians"] == pytest.approx(0.9)
    assert "| sw-lua | 18,000 (median of 3), 1 failed |" in report.markdown(rounds)


def test_per_round_ratios_pair_runs_of_the_same_round() -> None:
    rounds = copy.deepcopy(RESULTS)
    for row in rounds["throughput"]:
        row["round"] = 1
    rounds["throughput"] += [
        {**_tp("sw-none", 10_000.0), "round": 2},
        {**_tp("sw-lua", 5_000.0), "round": 2},
        {**_tp("sw-none", 40_000.0), "round": 3},
        {**_tp("sw-lua", 36_000.0), "round": 3},
        {**_tp("sw-lua", 5_000.0), "round": 4},  # no sw-none in round 4: no pair
    ]
    assert report.round_ratios(rounds, "sw-lua", "sw-none") == pytest.approx([0.9, 0.5, 0.9])
    t = {x["id"]: x for x in report.targets(rounds)}
    assert t["lua_vs_none"]["per_round"] == pytest.approx([0.9, 0.5, 0.9])
    assert t["lua_vs_none"]["value"] == pytest.approx(0.9)  # median of the rounds' ratios
    # Medians: sw-lua of 18k, 5k, 36k, 5k = 11.5k; sw-none of 20k, 10k, 40k = 20k.
    assert t["lua_vs_none"]["ratio_of_medians"] == pytest.approx(11_500 / 20_000)
    assert "0.90x (median of rounds: 0.90, 0.50, 0.90; ratio of medians 0.57x)" in (
        report.markdown(rounds)
    )


def test_report_only_rebuilds_the_report_from_the_json(tmp_path: Path) -> None:
    from benchmarks import proof_bench

    (tmp_path / "proof.json").write_text(json.dumps(RESULTS))
    assert proof_bench.main(["--report-only", "--out", str(tmp_path)]) == 0
    assert "## Targets" in (tmp_path / "proof.md").read_text()
    rebuilt = json.loads((tmp_path / "proof.json").read_text())
    assert [t["id"] for t in rebuilt["targets"]] == [t["id"] for t in report.targets(RESULTS)]


def test_an_unexpected_failure_becomes_an_error_row_that_fits_the_schema() -> None:
    from benchmarks import proof_bench

    def boom() -> dict[str, Any]:
        raise ConnectionError("redis went away")

    row = proof_bench._guarded(boom, {"variant": "sw-lua", "handler": "noop", "messages": 10})
    assert row["error"] == "ConnectionError: redis went away"
    broken = copy.deepcopy(RESULTS)
    broken["throughput"].append(row)
    assert report.validate(broken) == []
    assert "| sw-lua | 18,000, 1 failed |" in report.markdown(broken)
