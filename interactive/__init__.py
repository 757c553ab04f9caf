"""Interactive sessions: JupyterLab or a terminal on a node's GPUs, reached only through the portal.

A session is a TE job (``Job.session_kind`` set) whose process is the
session's server (``servers``); ``services`` submits it and stores where the
node says it listens (REPORT_SESSION, ``tasks``), ``selectors`` say who may
reach it and how it is doing. The portal proxies ``/sessions/<job id>/`` to it
(``portal/session_proxy.py``). See docs/sessions.md.
"""
