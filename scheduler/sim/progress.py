"""A progress bar on stderr, shown only for runs that take more than a moment."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Callable ``(done, total)``; draws nothing during the first ``delay`` seconds.

    On a terminal it redraws one line; elsewhere (a log file) it prints a line
    at most every 10 % so logs stay short.
    """

    def __init__(self, label: str, stream: TextIO | None = None, delay: float = 2.0, width: int = 30) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.delay = delay
        self.width = width
        self._t0 = time.monotonic()
        self._last_decile = -1
        self._drawn = False
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.monotonic() - self._t0
        if elapsed < self.delay and done < total:
            return
        if elapsed < self.delay and not self._drawn:
            return  # finished before the bar was worth showing
        frac = done / total if total else 1.0
        if self._tty:
            filled = int(self.width * frac)
            bar = "#" * filled + "-" * (self.width - filled)
            self.stream.write(f"\r{self.label} [{bar}] {done}/{total} jobs {elapsed:.0f}s")
            if done >= total:
                self.stream.write("\n")
        else:
            decile = int(frac * 10)
            if decile == self._last_decile:
                return
            self._last_decile = decile
            self.stream.write(f"{self.label}: {done}/{total} jobs ({100 * frac:.0f} %) {elapsed:.0f}s\n")
        self._drawn = True
        self.stream.flush()
