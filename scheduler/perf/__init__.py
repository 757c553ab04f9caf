"""Entry point for ``python -m scheduler.perf``; the model lives in ``scheduler.core.perf``."""
