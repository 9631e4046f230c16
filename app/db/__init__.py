"""Persistence plumbing: declarative base, engine/session factory, Alembic migration entry."""
