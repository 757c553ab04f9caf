"""Cluster state (nodes and GPUs), agent event handling and the node agent.

This package's ``__init__`` imports nothing: the node agent imports
``cluster.protocol`` and ``cluster.agent`` without Django installed or set up.
"""
