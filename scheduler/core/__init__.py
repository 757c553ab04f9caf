"""The pure scheduling core: model, policies, performance model, metrics.

Nothing in this package imports Django or Celery, performs I/O, reads the wall
clock or uses global random state.
"""
