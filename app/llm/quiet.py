"""Model loading without progress bars: the service's log is read by people and log shippers,
and a tqdm bar per model load ("Loading weights: 100%|████|") is noise there (and garbage when
stderr is not a terminal)."""

from __future__ import annotations


def quiet_model_loading() -> None:
    """Turn off the progress bars of transformers and huggingface_hub (process-wide, idempotent)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - the llm extra is not installed
        return
    hf_logging.disable_progress_bar()  # also huggingface_hub's
