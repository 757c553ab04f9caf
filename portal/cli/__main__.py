"""``python -m portal.cli``: the same entry point as the ``gpusched`` script."""

from portal.cli.main import main

raise SystemExit(main())
