"""Audit log of restart-controller actions (drain, requeue, exclude...), dry-run or real."""
