"""Running test workers at the same moment, each on its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection


def run_together(workers: list[Callable[[], object]]) -> list[object]:
    """Run callables in threads released at the same moment; each closes its own connection."""
    barrier = threading.Barrier(len(workers))
    results: list[object] = [None] * len(workers)

    def wrap(i: int, work: Callable[[], object]) -> None:
        try:
            barrier.wait()
            results[i] = work()
        except Exception as exc:  # noqa: BLE001 - the test inspects what each worker got
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=wrap, args=(i, w)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
