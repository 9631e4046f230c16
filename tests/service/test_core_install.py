"""The service runs on a core install (`pip install .`, no extras): every module it imports at
start-up and while diagnosing comes from the standard library, logdx itself or a distribution
that the core dependencies of pyproject.toml pull in. With the `none` LLM backend no LLM code is
imported. (.ci/core-install.sh checks the same from a wheel installed into a fresh virtualenv.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys
from pathlib import Path
from fastapi.testclient import TestClient
from app.api.app import create_app
from app.auth.models import TokenRole
from app.auth.service import create_token
from app.settings import Settings

settings = Settings(data_dir=Path(sys.argv[1]), diagnosis_executor="thread", diagnosis_workers=1)
app = create_app(settings)
with TestClient(app) as client:
    token = app.state.services.db.run(create_token, role=TokenRole.SCHEDULER, name="probe")[1]
    log = b"step 1 loss 2.0\nRuntimeError: CUDA error: out of memory\n"
    r = client.post("/v1/diagnose", content=log, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
print(json.dumps(sorted(sys.modules)))
"""


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def core_closure() -> set[str]:
    """Distribution names the core dependencies install (recursively, extras excluded)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    todo, seen = [_name(d) for d in deps], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def test_service_imports_only_core_dependencies(tmp_path):
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "data")], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    dists = metadata.packages_distributions()
    allowed = core_closure()
    outside = {}
    for mod in modules:
        top = mod.split(".")[0]
        if top in sys.stdlib_module_names or top in ("app", "__main__") or top.startswith("_"):
            continue
        names = {d.lower().replace("_", "-") for d in dists.get(top, [])}
        if names and not names & allowed:
            outside[top] = sorted(names)
    assert outside == {}, f"imported but not a core dependency: {outside}"
    assert not [m for m in modules if m.startswith(("app.llm.agent", "app.llm.backends"))]
