"""SharedRead: callers refreshing together share one read; none is served a read older than its news."""

from __future__ import annotations

import asyncio
import time

from portal.shared_read import SharedRead


def make_reader(delay: float = 0.05):  # noqa: ANN201
    calls: list[float] = []

    async def read() -> int:
        calls.append(time.monotonic())
        await asyncio.sleep(delay)
        return len(calls)

    return SharedRead(read), calls


def test_callers_told_of_the_same_change_share_one_read() -> None:
    async def scenario() -> None:
        shared, calls = make_reader()
        told = time.monotonic()
        values = await asyncio.gather(*(shared.get(newer_than=told) for _ in range(5)))
        assert values == [1] * 5 and len(calls) == 1 and shared.reads == 1

    asyncio.run(scenario())


def test_news_after_a_read_began_gets_a_new_read_even_while_that_read_runs() -> None:
    async def scenario() -> None:
        shared, calls = make_reader(delay=0.1)
        first = asyncio.ensure_future(shared.get(newer_than=time.monotonic()))
        await asyncio.sleep(0.03)  # the first read is running
        told_later = time.monotonic()
        later = await shared.get(newer_than=told_later)
        assert await first == 1 and later == 2 and len(calls) == 2
        assert calls[1] > told_later
        assert await shared.get(newer_than=told_later) == 2  # nothing new since: the last read serves

    asyncio.run(scenario())


def test_a_new_event_loop_starts_afresh() -> None:
    shared, calls = make_reader(delay=0)
    assert asyncio.run(shared.get(newer_than=float("-inf"))) == 1
    assert asyncio.run(shared.get(newer_than=float("-inf"))) == 2  # not the value of the loop before
    assert len(calls) == 2
