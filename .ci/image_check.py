"""Checks a built logdx image without a container runtime: its ENTRYPOINT runs in a chroot of the
image's own filesystem (`podman image mount`), as the image's USER, with the image's Env and
nothing else, on a fresh /data; then its HEALTHCHECK command must pass, the front door and
/readyz must answer, and a diagnosis must run with the compiled scan loop.

Run in a private mount namespace (the bind mounts vanish with it), as root:
    unshare -m --propagation private python3 .ci/image_check.py IMAGE
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

PORT = "18765"


def main(image: str) -> int:
    info = json.loads(subprocess.check_output(["podman", "inspect", image]))[0]
    config, health = info["Config"], info["Healthcheck"]["Test"]
    assert health[0] == "CMD", health
    assert config["User"].split(":")[0] not in ("", "0", "root"), config["User"]
    root = subprocess.check_output(["podman", "image", "mount", image], text=True).strip()
    data = tempfile.mkdtemp()
    uid, gid = (int(x) for x in config["User"].split(":"))
    os.chown(data, uid, gid)
    os.chmod(data, 0o700)
    for args in (["--rbind", "/proc", f"{root}/proc"], ["--rbind", "/dev", f"{root}/dev"],
                 ["--bind", data, f"{root}/data"]):
        subprocess.check_call(["mount", *args])
    env = [f"LOGDX_PORT={PORT}" if e.startswith("LOGDX_PORT=") else e for e in config["Env"]]
    inside = ["chroot", f"--userspec={config['User']}", root, "env", "-i", *env]
    print(f"user {config['User']}, entrypoint {config['Entrypoint']}, healthcheck {' '.join(health[1:3])} …")

    log_path = os.path.join(data, "..", "image-serve.log")
    with open(log_path, "wb") as log:
        server = subprocess.Popen([*inside, "sh", "-c", f'cd {config["WorkingDir"]} && exec "$@"', "-",
                                   *config["Entrypoint"]], stdout=log, stderr=subprocess.STDOUT)
    failures = []
    try:
        started, healthy = time.monotonic(), None
        while time.monotonic() - started < 120 and server.poll() is None:
            if subprocess.run([*inside, *health[1:]], capture_output=True).returncode == 0:
                healthy = time.monotonic() - started
                break
            time.sleep(1)
        print(f"HEALTHCHECK passed {healthy:.0f} s after start" if healthy else "HEALTHCHECK failed")
        if not healthy:
            failures.append("healthcheck")
        else:
            for path in ("/", "/readyz"):
                req = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}", headers={"Accept": "application/json"})
                print(path, urllib.request.urlopen(req, timeout=10).read().decode())
        probe = subprocess.run([*inside, "python3", "-c", "import app.resources as r, app.core._shapescan as s; "
                                "print(r.data_dir('rules')); print(s.__file__)"], capture_output=True, text=True)
        print(probe.stdout + probe.stderr, end="")
        sample = subprocess.run([*inside, "sh", "-c", "logdx diagnose \"$(python3 -c 'import app.resources as r; "
                                 "print(r.data_file(\"examples\", \"sample_job.log\"))')\""],
                                capture_output=True, text=True)
        print("logdx diagnose:", (sample.stdout.splitlines() or [sample.stderr])[0])
        if probe.returncode or sample.returncode or "ECCError" not in sample.stdout:
            failures.append("diagnose")
    finally:
        server.terminate()
        print("server stopped, exit", server.wait(timeout=30))
        print(open(log_path).read()[-1500:])
        subprocess.run(["umount", "-R", f"{root}/proc", f"{root}/dev", f"{root}/data"], check=False)
    print("image check:", "FAILED " + ", ".join(failures) if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "localhost/logdx:check"))
