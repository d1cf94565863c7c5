"""The chaos plan drawn from a seed: reproducible, and always a complete, well-formed plan."""

from __future__ import annotations

import pytest

from tests.chaos.schedule import SEED_ENV, Plan, make_plan, seed_from_env

SERVERS = ("redis", "postgres")


def _plan(seed: int, scenario: str = "sql-redis") -> Plan:
    return make_plan(
        seed,
        scenario,
        messages=300,
        workers=3,
        window_s=15.0,
        claim_idle_ms=1500,
        servers=SERVERS,
    )


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    assert _plan(7) == _plan(7)
    assert _plan(7).describe() == _plan(7).describe()
    assert _plan(7).faults != _plan(8).faults
    assert _plan(7, "lua-redis").faults != _plan(7, "sql-redis").faults


def test_every_plan_has_each_fault_and_poison_kind_and_ends_with_every_worker_running() -> None:
    for seed in range(300):
        _check_plan(_plan(seed))


def _check_plan(plan: Plan) -> None:
    kinds = [f.kind for f in plan.faults]
    assert kinds.count("kill") == 4
    assert kinds.count("pause") == 1
    assert kinds.count("restart_redis") == kinds.count("restart_postgres") == 1
    assert all(plan.kinds.count(k) >= 2 for k in ("invalid", "reject", "fail"))

    pause = next(f for f in plan.faults if f.kind == "pause")
    assert pause.hold_s >= 2 * 1.5  # past claim_idle_ms, and a reclaimer round after it

    running = {0: True, 1: True, 2: True}
    for action in plan.actions():
        assert 0 <= action.at_s <= plan.window_s
        if action.verb in ("kill", "stop"):
            assert action.worker is not None
            assert running[action.worker], f"{action} hits a worker another fault holds"
            running[action.worker] = False
        elif action.verb in ("start", "cont"):
            assert action.worker is not None
            running[action.worker] = True
    assert all(running.values())


def test_the_seed_comes_from_the_environment_and_garbage_is_refused_by_name() -> None:
    assert seed_from_env({}) is None
    assert seed_from_env({SEED_ENV: " "}) is None
    assert seed_from_env({SEED_ENV: "1234"}) == 1234
    with pytest.raises(ValueError, match=f"{SEED_ENV} must be a non-negative integer, got 'x1'"):
        seed_from_env({SEED_ENV: "x1"})
