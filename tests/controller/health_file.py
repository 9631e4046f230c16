"""A site's health-probe file for the tests: checks that fail on a chosen node, since no node
here has a GPU to fail (the node is SLURMD_NODENAME under srun, LOGDX_NODE for local checks)."""

from __future__ import annotations

import yaml

from app.controller.health import load_health_probes


def health_probes(tmp_path, bad=""):
    """Health checks as a site would declare them: one that fails on the node `bad` (hardware
    that does not exist here), one whose tool is not installed."""
    ecc = (f'n="${{SLURMD_NODENAME:-$LOGDX_NODE}}"; if [ "$n" = "{bad}" ]; then echo "Pending : Yes"; '
           'else echo "Pending : No"; fi')
    data = {"kind": "probes", "family": "probes", "probes": [
        {"id": "ecc", "command": "sh", "args": ["-c", ecc], "timeout_s": 30,
         "pass": {"exit_code": 0, "no_match": r"Pending\s*:\s*Yes"}},
        {"id": "gpu-health", "command": "logdx-no-such-nvidia-smi", "args": ["-q"], "timeout_s": 30,
         "pass": {"exit_code": 0}}]}
    path = tmp_path / "probes.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_health_probes(path)
