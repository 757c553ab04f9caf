"""gpusched's job-side helper: ``from gpusched import job`` in a training script (see docs/jobs.md).

This package has no dependencies beyond the standard library, so a job can
import it from any Python 3.8+ environment (or copy ``job.py`` next to the
training script).
"""
