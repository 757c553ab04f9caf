"""Scheduling: the pure core, the simulator and the live scheduling loop."""
