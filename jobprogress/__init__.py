"""Job progress on the server: what a job reports about itself (step, metrics, checkpoints) per attempt.

The reports come from the node agents (REPORT_PROGRESS, see cluster/agent/progress.py);
``services.record_progress`` stores them, ``selectors`` read them for the job page, the
API and the CLI, and ``eta`` turns the step history into a rate and a time to completion.
A Django app of its own: it adds to jobs without changing how they are scheduled.
"""
