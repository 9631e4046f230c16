"""A corrupt archive gets the same answer on every surface: the raw bytes are stored as given,
the diagnosis is made on what decodes, and compression.warnings says the archive is corrupt
(nothing decodable: Unknown with that warning). CLI, PUT /log, chunks and one-shot alike."""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
import time

import pytest

from tests.service.conftest import REPO, new_job

ECC = b"[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"


def _corrupt_tail_gzip() -> bytes:
    """Training, an ECC error, then a long C++ stack dump; the archive is damaged in the dump."""
    rnd = random.Random(7)
    train = [f"[2024-03-02 11:{i // 60 % 60:02d}:{i % 60:02d}] iteration {i}/ 500000 | lm loss: "
             f"{rnd.random():.6f} | grad norm: {rnd.random() * 3:.3f} |\n".encode() for i in range(3000)]
    dump = [f"[rank5]: frame #{i}: 0x{rnd.getrandbits(48):012x} in /usr/lib/libtorch_cuda.so "
            f"(c10::cuda::c10_cuda_check_implementation + 0x{rnd.getrandbits(16):x})\n".encode() for i in range(9000)]
    body = bytearray(gzip.compress(b"".join(train) + ECC + b"".join(dump)))
    cut = int(len(body) * 0.8)
    body[cut:cut + 64] = bytes(rnd.randrange(256) for _ in range(64))
    return bytes(body)


CASES = {
    "damaged_late": (_corrupt_tail_gzip(), "ECCError"),
    "nothing_decodes": (b"\x1f\x8b\x08\x00" + bytes(range(256)) * 8, "Unknown"),
}


def _cli(path) -> dict:
    out = subprocess.run([sys.executable, "-m", "app.cli", "diagnose", "--json", str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _diagnosis(client, sched, job: int) -> dict:
    resp = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)
    deadline = time.monotonic() + 60
    while resp.json()["status"] in ("pending", "running"):  # over the sync limit: queued
        assert time.monotonic() < deadline
        time.sleep(0.1)
        resp = client.get(f"/v1/diagnoses/{resp.json()['id']}", headers=sched)
    assert resp.json()["status"] == "done", resp.text
    return resp.json()["diagnosis"]


def _verdict(d: dict) -> tuple[str, bool]:
    warned = any("gzip stream is corrupt" in w or "gzip stream is truncated" in w
                 for w in d["compression"]["warnings"])
    return d["root_cause"]["error_type"], warned


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_corrupt_archive_gets_one_answer_on_every_surface(case, tmp_path, app, client, sched):
    body, expected = CASES[case]
    path = tmp_path / "job.log.gz"
    path.write_bytes(body)
    answers = {"cli": _verdict(_cli(path))}

    job = new_job(client, sched, external_id="put")["id"]
    put = client.put(f"/v1/jobs/{job}/log", content=body, headers=sched)
    assert put.status_code == 201, put.text
    assert put.json()["status"] == "corrupt" and put.json()["error"]
    assert app.state.services.store.blob_path(put.json()["sha256"]).read_bytes() == body  # nothing lost
    answers["put"] = _verdict(_diagnosis(client, sched, job))

    job = new_job(client, sched, external_id="chunks")["id"]
    half = len(body) // 2
    assert client.post(f"/v1/jobs/{job}/log/chunks", params={"offset": 0}, content=body[:half],
                       headers=sched).status_code == 200
    sealed = client.post(f"/v1/jobs/{job}/log/chunks", params={"offset": half, "final": "true"},
                         content=body[half:], headers=sched)
    assert sealed.status_code == 200, sealed.text
    assert (sealed.json()["status"], sealed.json()["error"]) == (put.json()["status"], put.json()["error"])
    answers["chunks"] = _verdict(_diagnosis(client, sched, job))

    one_shot = client.post("/v1/diagnose", content=body, headers=sched)
    assert one_shot.status_code == 200, one_shot.text
    answers["one_shot"] = _verdict(one_shot.json())

    assert answers == {surface: (expected, True) for surface in answers}
