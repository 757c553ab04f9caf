"""One read shared by the live pages of a process that refresh together.

After a change every open cluster page refreshes within the same 100 ms; each reading the whole
cluster for itself would cost the portal one full read per open page. ``SharedRead`` makes one read
serve them all, and never serves a caller a read that began before the change it was told of: a
hint reaches a consumer after the change committed, so a read that began after the hint arrived
sees the change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedRead(Generic[T]):
    """``get(newer_than)``: the last read if it began after ``newer_than`` (``time.monotonic()``), else a
    new one. One read at a time: callers arriving during a read wait for it and take it when it began
    after their ``newer_than``. The value is shared: callers must not change it."""

    def __init__(self, read: Callable[[], Awaitable[T]]) -> None:
        self._read = read
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()
        self._began = float("-inf")
        self._value: T | None = None
        self.reads = 0  # how many reads were made (for tests and benchmarks)

    async def get(self, newer_than: float) -> T:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a lock and a value belong to one event loop (a server has one)
            self._loop, self._lock, self._began, self._value = loop, asyncio.Lock(), float("-inf"), None
        async with self._lock:
            if self._value is None or self._began <= newer_than:
                began = time.monotonic()
                self._value = await self._read()
                self._began = began
                self.reads += 1
            return self._value
