"""GPU telemetry on the server: what the agents sample of each GPU and job, kept as bounded series.

The reports come from the node agents (REPORT_TELEMETRY, see cluster/agent/telemetry.py);
``services.ingest`` checks and stores them (``store``: fixed-size Redis rings), ``selectors``
read them for the node and job pages, and ``exporter`` puts the latest readings on
``/metrics`` under DCGM exporter's names. A Django app of its own: it adds to nodes and jobs
without changing how they are scheduled.
"""
