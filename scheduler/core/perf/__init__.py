"""Rubick's performance model: iteration time per execution plan and allocation.

Start with ``throughput.ThroughputModel`` (fitted models, ``iter_time``,
``best_plan``); ``docs/perf_model.md`` describes the model, its fit and its
validation. Pure: no Django, no global state; only the ``data.load_*``
readers (and ``ThroughputModel.from_traces``, which calls them) touch files,
and only the ones the caller names.
"""

from scheduler.core.perf.plans import Plan, PlanError, parse_placement, parse_plan
from scheduler.core.perf.throughput import ThroughputModel

__all__ = ["Plan", "PlanError", "ThroughputModel", "parse_placement", "parse_plan"]
