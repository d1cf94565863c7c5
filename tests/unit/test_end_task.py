"""runtime.tasks.end_task: a background loop ends on stop even when it lost a cancellation."""

from __future__ import annotations

import asyncio

from streamworker.runtime.tasks import end_task


async def _loop_that_loses_one_cancel(swallowed: list[int]) -> None:
    # What a lost cancellation looks like from inside (asyncio.wait_for on 3.11, gh-86296): the
    # CancelledError never reaches the loop, which goes on to its next pause.
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed.append(1)


async def _loop_that_ignores_cancels(released: asyncio.Event) -> None:
    while not released.is_set():
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            continue


def test_a_loop_that_lost_its_cancellation_is_cancelled_again_and_ends() -> None:
    async def scenario() -> tuple[bool, bool, list[int]]:
        swallowed: list[int] = []
        task = asyncio.ensure_future(_loop_that_loses_one_cancel(swallowed))
        await asyncio.sleep(0)
        ended = await end_task(task, timeout_s=10.0)
        return ended, task.cancelled(), swallowed

    ended, cancelled, swallowed = asyncio.run(scenario())
    assert swallowed == [1]
    assert ended
    assert cancelled


def test_a_loop_that_never_ends_is_given_up_on_at_the_deadline() -> None:
    async def scenario() -> tuple[bool, float]:
        released = asyncio.Event()
        task = asyncio.ensure_future(_loop_that_ignores_cancels(released))
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        ended = await end_task(task, timeout_s=0.3)
        took = loop.time() - started
        released.set()  # a test leaves no task behind
        await task
        return ended, took

    ended, took = asyncio.run(scenario())
    assert not ended
    assert took >= 0.3


def test_a_task_that_ended_on_an_error_is_ended_and_its_error_retrieved() -> None:
    async def failing() -> None:
        raise RuntimeError("boom")

    async def scenario() -> bool:
        task = asyncio.ensure_future(failing())
        await asyncio.sleep(0)
        return await end_task(task)

    assert asyncio.run(scenario())
