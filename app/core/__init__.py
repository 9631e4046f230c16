"""Pure pipeline stages: ingest -> compress -> diagnose -> act. No web or DB imports here."""
