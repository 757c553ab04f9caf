"""Entry point: ``python -m scheduler.sim`` (see :mod:`scheduler.sim.cli`)."""

import sys

from scheduler.sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
