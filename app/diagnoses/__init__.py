"""Diagnosis requests and results (never overwritten) and the workers that produce them."""
