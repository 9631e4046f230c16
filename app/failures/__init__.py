"""Failures as engineers see them: diagnosed jobs, and failure groups (one fingerprint across jobs)."""
