"""``python -m scheduler.perf validate [--traces DIR] [--json FILE]``."""

from scheduler.core.perf.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main())
