"""logdx: failure diagnosis for LLM training jobs."""

__version__ = "0.1.0"
