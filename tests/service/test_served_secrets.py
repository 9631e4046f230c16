"""No served text shows a secret from the log: the compressed log (API and job page), the
failure list, its search and the failure groups."""

from __future__ import annotations

from tests.service.conftest import new_job
from tests.web.conftest import sign_in

AWS = "AKIAIOSFODNN7EXAMPLE"
BEARER = "eyQ9xLmN3pR7sT2vW8yZ"
PASSWORD = "hunter2-Correct-Horse"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"
SECRETS = (AWS, BEARER, PASSWORD, HF)
LOG = (
    "".join(f"[node-7] iteration {i}/ 100 | lm loss: 2.0E+00 |\n" for i in range(20))
    + f"[node-7] export AWS_ACCESS_KEY_ID={AWS}\n"
    + f"[node-7] curl -H 'Authorization: Bearer {BEARER}' https://hub.example.com\n"
    + f"[node-7] connecting with password={PASSWORD}\n"
    + f"[node-7] huggingface login {HF}\n"
    + "[node-7] RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    + f"[node-7] RuntimeError: CUDA error: uncorrectable ECC error encountered password={PASSWORD}\n"
).encode()


def _clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{where} shows {secret}"


def test_no_served_text_shows_a_secret(client, tokens, sched):
    eng = {"Authorization": f"Bearer {tokens['engineer']}"}
    job = new_job(client, sched)["id"]
    assert client.put(f"/v1/jobs/{job}/log", content=LOG, headers=sched).status_code == 201
    diagnosis = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched)
    assert diagnosis.status_code == 200, diagnosis.text
    compressed = client.get(f"/v1/diagnoses/{diagnosis.json()['id']}/compressed", headers=eng)
    assert compressed.status_code == 200
    assert "<SECRET>" in compressed.text
    _clean(compressed.text, "the compressed log")
    _clean(diagnosis.text, "the diagnosis")
    sign_in(client, tokens["engineer"])
    for url in (f"/ui/jobs/{job}", "/ui/", "/ui/?q=password", "/ui/?q=ECC", "/ui/groups"):
        page = client.get(url)
        assert page.status_code == 200, url
        _clean(page.text, url)
    assert "&lt;SECRET&gt;" in client.get(f"/ui/jobs/{job}").text
