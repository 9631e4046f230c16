"""Rules proposed by the LLM rule writer (or by engineers), validated, then reviewed."""
