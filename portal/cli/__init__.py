"""``gpusched``: the command-line client of the portal's REST API.

In the spirit of sbatch/squeue/scancel: ``gpusched submit``, ``list``, ``show``,
``cancel``, ``logs``, ``quota`` and ``nodes``. It talks HTTP only (``requests``)
and imports no Django, so it works on any machine that can reach the portal.
"""
