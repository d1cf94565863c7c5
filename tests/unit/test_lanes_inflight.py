"""Running lanes concurrently (per-key concurrency) and the in-flight budget (bounded memory)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from streamworker.core.keyed import run_lanes
from streamworker.runtime.inflight import InFlight, InFlightGate


async def test_one_lanes_items_never_overlap_and_run_in_order() -> None:
    running: set[str] = set()
    seen: list[tuple[str, int]] = []

    async def run(lane: Sequence[tuple[str, int]]) -> None:
        for key, n in lane:
            assert key not in running, f"key {key} ran twice at once"
            running.add(key)
            await asyncio.sleep(0)  # yield: another lane may run now
            seen.append((key, n))
            running.discard(key)

    lanes = [[(k, n) for n in range(20)] for k in "abcde"]
    await run_lanes(lanes, 3, run)
    for k in "abcde":
        assert [n for key, n in seen if key == k] == list(range(20))


async def test_a_slow_lane_does_not_block_the_others() -> None:
    slow_may_finish = asyncio.Event()
    fast_done: list[int] = []

    async def run(lane: Sequence[int]) -> None:
        if lane[0] == 0:
            await slow_may_finish.wait()
            return
        fast_done.extend(lane)
        if len(fast_done) == 9:
            # Every other lane finished while the slow one still waits: it did not hold them up.
            slow_may_finish.set()

    lanes = [[0]] + [[n] for n in range(1, 10)]
    await asyncio.wait_for(run_lanes(lanes, 2, run), timeout=5)
    assert sorted(fast_done) == list(range(1, 10))


async def test_at_most_concurrency_lanes_run_at_once() -> None:
    now = 0
    peak = 0

    async def run(lane: Sequence[int]) -> None:
        nonlocal now, peak
        now += 1
        peak = max(peak, now)
        for _ in range(3):
            await asyncio.sleep(0)
        now -= 1

    await run_lanes([[n] for n in range(30)], 4, run)
    assert peak == 4


async def test_a_failing_lane_lets_running_lanes_finish_and_starts_no_more() -> None:
    started: list[int] = []
    finished: list[int] = []
    other_started = asyncio.Event()

    async def run(lane: Sequence[int]) -> None:
        started.append(lane[0])
        if lane[0] == 0:
            await other_started.wait()
            raise RuntimeError("boom")
        other_started.set()
        await asyncio.sleep(0)
        finished.append(lane[0])

    with pytest.raises(RuntimeError, match="boom"):
        await run_lanes([[0], [1], [2], [3]], 2, run)
    assert started == [0, 1]
    assert finished == [1]


async def test_cancelling_the_run_cancels_and_awaits_its_lanes() -> None:
    entered = asyncio.Event()
    cancelled: list[int] = []

    async def run(lane: Sequence[int]) -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(lane[0])
            raise

    task = asyncio.ensure_future(run_lanes([[1], [2]], 2, run))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == [1, 2]


def test_room_is_the_batch_size_cut_to_the_messages_left() -> None:
    budget = InFlight(max_messages=10)
    assert budget.room(100) == 10
    budget.take(7, 700)
    assert budget.room(100) == 3
    assert budget.room(2) == 2
    budget.take(3, 300)
    assert budget.room(100) == 0


def test_without_bounds_the_room_is_the_batch_size() -> None:
    budget = InFlight()
    budget.take(1_000, 10**9)
    assert not budget.bounded
    assert budget.room(100) == 100


def test_the_byte_bound_sizes_reads_by_the_mean_entry_seen() -> None:
    budget = InFlight(max_bytes=1_000)
    assert budget.room(50) == 1  # no entry seen yet: learn the size from one
    budget.take(1, 100)
    assert budget.room(50) == 9  # 900 bytes left, 100 per entry
    budget.take(9, 900)
    assert budget.room(50) == 0
    budget.give_back(10, 1_000)
    assert budget.room(50) == 10


def test_one_entry_larger_than_the_byte_bound_is_admitted_alone() -> None:
    budget = InFlight(max_bytes=1_000)
    budget.take(1, 5_000)
    budget.give_back(1, 5_000)
    assert budget.room(10) == 1  # nothing held: room for one, however large
    budget.take(1, 5_000)
    assert budget.room(10) == 0


def test_a_gate_reads_under_the_smallest_room_of_its_budgets() -> None:
    worker, handler = InFlight(max_messages=6), InFlight(max_messages=4)
    gate = InFlightGate(handler, worker, InFlight())
    assert gate.room(10) == 4
    gate.take(3, 0)
    other = InFlightGate(InFlight(), worker)  # another handler of the same worker
    assert other.room(10) == 3
    other.take(3, 0)
    assert gate.room(10) == 0
    assert (worker.messages, handler.messages) == (6, 3)


async def test_a_read_waits_for_room_and_resumes_when_messages_leave() -> None:
    budget = InFlight(max_messages=5)
    budget.take(5, 0)
    waiter = asyncio.ensure_future(budget.wait_for_room(100))
    await asyncio.sleep(0)
    assert not waiter.done()
    budget.give_back(2, 0)
    assert await asyncio.wait_for(waiter, timeout=5) == 2


async def test_the_bound_holds_under_a_reader_and_slow_handlers() -> None:
    budget = InFlight(max_messages=8)
    total = 0

    async def handle(n: int) -> None:
        for _ in range(n % 3 + 1):
            await asyncio.sleep(0)
        budget.give_back(1, 0)

    handlers: list[asyncio.Task[None]] = []
    while total < 200:
        room = await budget.wait_for_room(5)
        budget.take(room, 0)
        assert budget.messages <= 8
        handlers += [asyncio.ensure_future(handle(total + i)) for i in range(room)]
        total += room
    await asyncio.gather(*handlers)
    assert budget.peak_messages == 8
    assert budget.messages == 0


def test_a_reservation_that_brought_nothing_teaches_no_entry_size() -> None:
    # An empty read must not make entries look 0 bytes long (the next read would ask for all).
    budget = InFlight(max_bytes=1_000)
    budget.reserve(1)
    budget.give_back(1, 0)
    assert budget.room(50) == 1
    budget.reserve(1)
    budget.arrived(1, 200)
    budget.give_back(0, 0)
    assert budget.room(50) == 4  # 800 bytes left, 200 per entry; 1 entry held
