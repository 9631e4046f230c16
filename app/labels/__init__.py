"""Human verdicts on diagnoses: confirm, or correct the root cause."""
