"""logdx installed as users install it: `python3 -m build` makes a wheel and an sdist, the wheel
goes into a fresh virtualenv (not editable, no extras, no system site-packages), and everything
then runs from a directory outside the checkout: a diagnosis, `logdx rules test`, `logdx serve`
with real HTTP calls, the rules export and overlay, and deploy/entrypoint.sh. The README's
"Install from a wheel" and "Deploy" blocks are run as written (as tests/test_readme.py runs the
scheduler flow).

Slow (a few minutes: the build and pip's install of the dependencies, from its cache when warm).
LOGDX_TEST_BUILD_PYTHON: the Python that runs `python3 -m build` and creates the venv (default:
this one; it needs the `build` package, in the dev extra).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
# what the sdist is built from: a copy, so the build writes nothing into the checkout
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "alembic.ini", "app", "rules", "prompts",
           "alembic", "examples", "tests/data/metric_lines.txt", "tests/data/normal_lines.txt", "deploy")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "_data", "*.egg-info")


def readme_block(marker: str) -> str:
    after = README.split(f"<!-- {marker}", 1)[1]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Installed:
    clone: Path
    home: Path
    venv: Path
    env: dict[str, str]
    dist: Path
    output: str

    def logdx(self, *args: str, cwd: Path | None = None, check: bool = True,
              **env: str) -> subprocess.CompletedProcess:
        out = subprocess.run([str(self.venv / "bin" / "logdx"), *args], cwd=cwd or self.home,
                             env={**self.env, **env}, capture_output=True, text=True, timeout=300)
        if check:
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return out


def _clean_env(home: Path, shims: Path, work: Path) -> dict[str, str]:
    """The environment of a user's shell: nothing that points into the checkout or the test venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOGDX_") and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PATH"] = os.pathsep.join([str(shims), *(p for p in os.environ.get("PATH", "").split(os.pathsep)
                                                 if p and not p.startswith(sys.prefix))])
    # pip reuses the user's wheel cache (a warm rerun installs the dependencies in seconds)
    env.setdefault("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    env["HOME"] = str(home)
    env["LOGDX_RULES_CACHE_DIR"] = str(work / "rules-cache")
    env["LOGDX_LLM_BACKEND"] = "none"
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """The README's "Install from a wheel" block, run as written in a copy of the checkout."""
    work = tmp_path_factory.mktemp("packaging")
    clone, home, shims = work / "clone", work / "home", work / "shims"
    for name in SOURCES:
        src, dst = REPO / name, clone / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=IGNORE)
        else:
            shutil.copy2(src, dst)
    home.mkdir()
    shutil.copy(REPO / "examples" / "sample_job.log", home / "job.log")
    shims.mkdir()
    python = os.environ.get("LOGDX_TEST_BUILD_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import build"], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, f"{python} has no `build` package: pip install -e '.[dev]' ({probe.stderr[-300:]})"
    (shims / "python3").write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
    (shims / "python3").chmod(0o755)
    env = _clean_env(home, shims, work)
    started = time.monotonic()
    out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + readme_block("wheel-install")], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=1200)
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-4000:]
    print(f"\nbuilt and installed the wheel in {time.monotonic() - started:.0f} s")
    return Installed(clone=clone, home=home, venv=home / "logdx", env=env, dist=clone / "dist", output=output)


def test_the_readme_builds_a_wheel_and_an_sdist_and_runs_from_the_wheel(installed):
    wheels, sdists = sorted(installed.dist.glob("logdx-*.whl")), sorted(installed.dist.glob("logdx-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    assert "examples pass" in installed.output and "FAIL" not in installed.output  # logdx rules test
    assert "ECCError" in installed.output  # logdx diagnose job.log


def test_the_wheel_carries_the_data_and_the_sdist_its_sources(installed):
    names = set(zipfile.ZipFile(next(installed.dist.glob("*.whl"))).namelist())
    for must in ("app/_data/rules/nccl.yaml", "app/_data/rules/filters/torch.yaml", "app/_data/rules/policies.yaml",
                 "app/_data/rules/recovery.yaml", "app/_data/rules/probes.yaml", "app/_data/prompts/root_cause/v1.yaml",
                 "app/_data/alembic/env.py", "app/_data/alembic/script.py.mako",
                 "app/_data/examples/sample_job.log", "app/_data/corpora/metric_lines.txt",
                 "app/web/templates/login.html", "app/web/static/app.css", "app/resources.py"):
        assert must in names, must
    shipped = {p.relative_to(REPO / "rules").as_posix() for p in (REPO / "rules").rglob("*.yaml")}
    assert {n.removeprefix("app/_data/rules/") for n in names if n.startswith("app/_data/rules/")} == shipped
    migrations = {p.name for p in (REPO / "alembic" / "versions").glob("*.py")}
    assert {Path(n).name for n in names if n.startswith("app/_data/alembic/versions/")} == migrations
    # nothing outside the package, and no sources of the C loop
    assert all(n.startswith(("app/", "logdx-")) for n in names), sorted(n for n in names if not n.startswith("app/"))
    assert not any(n.endswith((".c", ".h")) for n in names)
    with tarfile.open(next(installed.dist.glob("*.tar.gz"))) as sdist:
        members = {m.split("/", 1)[1] for m in sdist.getnames() if "/" in m}
    for must in ("rules/nccl.yaml", "prompts/root_cause/v1.yaml", "alembic/env.py", "alembic.ini", "MANIFEST.in",
                 "app/core/_shapescan.c", "app/core/_shapehash.h", "tests/data/metric_lines.txt", "setup.py"):
        assert must in members, must


def test_the_installed_package_reads_its_own_data_not_the_checkout(installed):
    script = ("import json, app, app.resources as r\n"
              "out = {'app': app.__file__, **{n: str(r.data_dir(n)) for n in r.DATA}}\n"
              "try:\n    import app.core._shapescan as s; out['scan'] = s.__file__\n"
              "except ImportError:\n    out['scan'] = None\n"
              "print(json.dumps(out))")
    out = subprocess.run([str(installed.venv / "bin" / "python"), "-c", script], cwd=installed.home,
                         env=installed.env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    site = str(installed.venv / "lib")
    for name, path in found.items():
        if path is not None:
            assert path.startswith(site), (name, path)
    if shutil.which("cc") or shutil.which("gcc"):
        assert found["scan"], "the C scan loop was not built into the wheel"
    pyvenv = (installed.venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in pyvenv


def test_serve_from_the_wheel_answers_api_calls(installed, tmp_path):
    data = tmp_path / "data"
    env = {"LOGDX_DATA_DIR": str(data), "LOGDX_DIAGNOSIS_EXECUTOR": "thread"}
    token = installed.logdx("token", "create", "--role", "scheduler", "--name", "wheel-check", **env).stdout.strip()
    port = free_port()
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(installed.venv / "bin" / "logdx"), "serve", "--port", str(port), "--log-level",
                             "warning"], cwd=installed.home, env={**installed.env, **env}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not answer /healthz"
            time.sleep(0.5)
        assert httpx.get(f"{url}/readyz", timeout=10).json()["status"] == "ready"  # migrated from the wheel's alembic
        resp = httpx.post(f"{url}/v1/diagnose", content=(installed.home / "job.log").read_bytes(), timeout=120,
                          headers={"Authorization": f"Bearer {token}", "Content-Type": "text/plain"})
        assert resp.status_code == 200, resp.text
        assert resp.json()["root_cause"]["error_type"] == "ECCError"
        index = httpx.get(url, headers={"Accept": "application/json"}, timeout=10).json()
        assert index["name"] == "logdx" and index["links"]["ui"] == "/ui/"
        login = httpx.get(url, headers={"Accept": "text/html"}, follow_redirects=True, timeout=10)
        assert login.status_code == 200 and "<form" in login.text  # templates from the wheel
        assert httpx.get(f"{url}/ui/static/app.css", timeout=10).status_code == 200
        assert httpx.get(f"{url}/docs", timeout=10).status_code == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def test_rules_export_and_an_overlay_from_the_wheel(installed, tmp_path):
    exported = tmp_path / "exported"
    installed.logdx("rules", "export", str(exported))
    assert (exported / "nccl.yaml").is_file() and (exported / "filters" / "torch.yaml").is_file()
    again = installed.logdx("rules", "export", str(exported), check=False)
    assert again.returncode == 2 and "not empty" in again.stderr
    assert installed.logdx("rules", "test", "--rules", str(exported)).returncode == 0

    overlay = tmp_path / "site-rules"
    overlay.mkdir()
    (overlay / "site.yaml").write_text(
        "kind: diagnosis\nfamily: site\nrules:\n"
        "  - id: site-scratch-quota\n    error_type: StorageError\n"
        "    pattern: 'scratchfs: quota exceeded for project'\n"
        "    examples: {match: ['scratchfs: quota exceeded for project llm7'], no_match: ['scratchfs: ok']}\n")
    job = tmp_path / "site.log"
    job.write_text("step 1 loss 2.0\nscratchfs: quota exceeded for project llm7\n")
    plain = json.loads(installed.logdx("diagnose", str(job), "--json").stdout)
    assert plain["root_cause"]["rule_id"] != "site-scratch-quota"
    with_overlay = json.loads(installed.logdx("diagnose", str(job), "--json", LOGDX_RULES_OVERLAY=str(overlay)).stdout)
    assert with_overlay["root_cause"]["rule_id"] == "site-scratch-quota"
    tested = installed.logdx("rules", "test", "--overlay", str(overlay))
    assert "FAIL" not in tested.stdout

    (overlay / "clash.yaml").write_text(
        "kind: diagnosis\nfamily: site\nrules:\n"
        "  - id: cuda-ecc-uncorrectable\n    error_type: ECCError\n    pattern: 'site ecc'\n"
        "    examples: {match: ['site ecc'], no_match: ['fine']}\n")
    clash = installed.logdx("diagnose", str(job), LOGDX_RULES_OVERLAY=str(overlay), check=False)
    assert clash.returncode == 2
    assert str(overlay / "clash.yaml") in clash.stderr and "cuda.yaml" in clash.stderr, clash.stderr


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README block uses curl")
def test_the_readme_deploy_block_migrates_and_serves_from_the_entrypoint(installed):
    port = free_port()
    script = readme_block("deploy-entrypoint").replace("8000", str(port))
    pidfile = installed.home / "entrypoint.pid"
    out = subprocess.run(["bash", "-c", f"set -euo pipefail\n{script}\necho $! > {pidfile}"], cwd=installed.clone,
                         env=installed.env, stdout=open(installed.home / "deploy-block.out", "wb"),  # noqa: SIM115
                         stderr=subprocess.STDOUT, timeout=180)
    printed = (installed.home / "deploy-block.out").read_text()
    pid = int(pidfile.read_text()) if pidfile.exists() else None
    try:
        assert out.returncode == 0, printed[-3000:]
        assert '"status":"ok"' in printed and '"healthz":"/healthz"' in printed
        served = installed.home / "logdx-serve.log"
        assert "migrated the database from empty to" in served.read_text()
        assert (installed.home / "logdx-data" / "logdx.db").is_file()
        # the entrypoint's process is the server itself (exec): a stop signal reaches uvicorn
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"serve" in cmdline and any(part.endswith(b"/logdx") for part in cmdline), cmdline
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.2)
    # with arguments it runs that command after the same migration; a rules dir is seeded once
    entry = installed.venv / "bin" / "logdx-entrypoint"
    rules = installed.home / "site-rules"
    env = {**installed.env, "LOGDX_DATA_DIR": str(installed.home / "logdx-data"), "LOGDX_RULES_DIR": str(rules)}
    once = subprocess.run([str(entry), "rules", "test"], env=env, capture_output=True, text=True, timeout=300)
    assert once.returncode == 0, once.stderr[-2000:]
    assert "newest revision" in once.stderr  # migrated by the deploy block above
    assert (rules / "nccl.yaml").is_file() and "examples pass" in once.stdout
    broken = {**env, "LOGDX_DATABASE_URL": "postgresql+psycopg://logdx@127.0.0.1:1/logdx"}
    failed = subprocess.run([str(entry)], env=broken, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 2 and "cannot migrate" in failed.stderr  # never serves on a failed migration
