"""The simulator's progress bar: tqdm's, on stderr, only on a terminal and only
for runs that take more than a moment."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm


class ProgressBar:
    """Callable ``(done, total)``, the engine's progress callback, drawing a
    tqdm bar labelled ``label`` on ``stream`` (stderr by default).

    Nothing is drawn during the first ``delay`` seconds after construction (a
    short run shows no bar at all), nor when ``stream`` is not a terminal (tqdm
    decides; a log file gets no carriage-return redraws).
    """

    def __init__(self, label: str, stream: TextIO | None = None, delay: float = 2.0) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.delay = delay
        self._t0 = time.monotonic()
        self._bar: tqdm | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            # The engine reports first after some batches; the delay counts from the run's start.
            waited = time.monotonic() - self._t0
            self._bar = tqdm(total=total, desc=self.label, unit="jobs", file=self.stream, disable=None,
                             delay=max(0.0, self.delay - waited), leave=True, dynamic_ncols=True)
        self._bar.update(done - self._bar.n)
        if done >= total:
            self._bar.close()
