from pathlib import Path

import pytest

from app.llm.backends import REGISTRY, create_backend
from app.llm.backends.base import LLMBackend
from app.llm.errors import BackendUnavailable, PromptError, UnknownBackendError
from app.llm.prompts import load_all_prompts, load_prompt, load_prompt_file


def test_unknown_backend_raises_and_names_known_ones():
    with pytest.raises(UnknownBackendError, match="known: .*openai"):
        create_backend("gpt-local")


def test_none_backend_refuses_calls():
    b = create_backend("none")
    assert isinstance(b, LLMBackend)
    with pytest.raises(BackendUnavailable):
        b.complete_json("x", {})


def test_registry_names_match_settings_enum():
    from app.settings import LLMBackendName

    assert {m.value for m in LLMBackendName} <= set(REGISTRY)


def test_every_shipped_prompt_loads():
    refs = {p.ref.split("#")[0] for p in load_all_prompts()}
    assert {"root_cause/v2", "root_cause/v3", "root_cause_choice/v1", "rule_writer/v2"} <= refs


def _write(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "t"
    d.mkdir(exist_ok=True)
    p = d / "v1.yaml"
    p.write_text(body)
    return p


def test_prompt_with_undeclared_variable_fails_at_load(tmp_path):
    p = _write(tmp_path, "task: t\nversion: v1\nmode: choice\ndescription: x\nvariables: [a]\nuser: '${a} ${b}'\n")
    with pytest.raises(PromptError, match=r"undeclared variable\(s\) \['b'\]"):
        load_prompt_file(p)


def test_prompt_with_unused_variable_fails_at_load(tmp_path):
    p = _write(tmp_path, "task: t\nversion: v1\nmode: choice\ndescription: x\nvariables: [a, c]\nuser: '${a}'\n")
    with pytest.raises(PromptError, match="unused"):
        load_prompt_file(p)


def test_render_refuses_missing_values_and_keeps_braces_in_values():
    p = load_prompt("root_cause_choice")
    with pytest.raises(PromptError):
        p.render(candidates="A) x")
    _, user = p.render(candidates="A) x", log='{"loss": 1} ${not_a_var}')
    assert '{"loss": 1} ${not_a_var}' in user
    assert p.ref.startswith("root_cause_choice/v1#")
