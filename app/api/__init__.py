"""HTTP layer: app factory, error handling, dependencies, metrics."""
