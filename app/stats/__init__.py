"""Failure statistics: failed jobs and failed GPU-hours per error type, category, cluster, host."""
