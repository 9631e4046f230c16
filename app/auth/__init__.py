"""API tokens (stored as sha256 hashes) and role checks: scheduler < engineer < admin."""
