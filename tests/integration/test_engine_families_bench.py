"""benchmarks/engine_families_bench: the family rows follow the engine's command table, and a
``--quick`` run on a tiny size measures every available family on all four backends."""

from __future__ import annotations

import re
import shutil

import pytest
import redis

from benchmarks import engine_families_bench as bench
from tests.support.servers import missing_service


def test_a_family_is_benchmarked_only_when_all_its_commands_are_in_the_table() -> None:
    table = (bench.engine_table() | {"pfadd"}) - {"pfcount"}  # one HLL command missing
    have, missing = bench.available_families(table)
    names = {f.name for f in have}
    assert {"strings", "sorted sets"} <= names
    assert "hyperloglog" not in names
    assert "hyperloglog" in {f.name for f in missing}
    have, _ = bench.available_families(table | {"pfcount"})
    assert "hyperloglog" in {f.name for f in have}


def _row_cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().split("|")]


@pytest.mark.slow
def test_a_quick_run_measures_every_available_family_on_every_backend(
    capsys: pytest.CaptureFixture[str],
) -> None:
    if shutil.which("redis-server") is None:
        missing_service("redis-server")
    assert bench.main(["--quick", "--ops", "20", "--members-total", "1000"]) == 0
    out = capsys.readouterr().out
    assert "error:" not in out
    have, _ = bench.available_families(bench.engine_table())
    lines = out.splitlines()
    for fam in have:
        rows = [_row_cells(ln) for ln in lines if _row_cells(ln)[0] == fam.name]
        assert [r[1] for r in rows] == ["off", "100"], fam.name
        for r in rows:
            # engine-tcp, engine, fakeredis, redis-server: a positive rate each, then ratios.
            rates = r[3:7]
            # (a "*" marks an op stopped by the time budget)
            assert all(re.fullmatch(r"[\d,]+\*?", c) for c in rates), r
            assert all(int(c.rstrip("*").replace(",", "")) > 0 for c in rates), r
            assert all(re.fullmatch(r"\d+\.\d\dx", c) for c in r[7:]), r
    memory = [_row_cells(ln) for ln in lines if _row_cells(ln)[0] in bench.MEMORY_KINDS]
    assert len(memory) == len(bench.MEMORY_KINDS) * 3
    for r in memory:
        # engine tracemalloc, redis used_memory delta, redis MEMORY USAGE: all positive.
        assert min(float(x) for x in r[3:6]) > 0, r


def test_the_table_names_subcommands_as_container_bar_sub() -> None:
    table = bench.engine_table()
    assert "xgroup|create" in table
    assert "xgroup" in table


@pytest.mark.parametrize("family", bench.FAMILIES, ids=lambda f: f.name)
@pytest.mark.parametrize("pipelined", [False, True], ids=["unpipelined", "pipelined"])
def test_every_family_runs_without_error_on_redis_server(
    redis_client: redis.Redis, family: bench.Family, pipelined: bool
) -> None:
    # Families the engine does not have yet are proven here, so their rows work when they land.
    redis_client.flushdb()
    measured = bench.measure(redis_client, family, 20, pipelined)
    assert measured.total.error is None
    assert measured.total.ops > 0
