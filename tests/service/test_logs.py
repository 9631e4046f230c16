from __future__ import annotations

import os

import zstandard

from tests.service.conftest import gz, new_job, sample_log
from tests.service.test_errors import assert_error


def _job(client, sched) -> int:
    return new_job(client, sched)["id"]


def test_put_plain_gzip_and_zstd(app, client, sched):
    job = _job(client, sched)
    data = sample_log()
    for body, encoding in [(data, "plain"), (gz(data), "gzip"), (zstandard.compress(data), "zstd")]:
        # compressed bodies are shorter than the plain log stored before them: replace explicitly
        resp = client.put(f"/v1/jobs/{job}/log", content=body, headers=sched, params={"replace": "true"})
        assert resp.status_code == 201, resp.text
        log = resp.json()
        assert (log["encoding"], log["status"], log["size"]) == (encoding, "complete", len(body))
        path = app.state.services.store.blob_path(log["sha256"])
        assert path.read_bytes() == body  # raw bytes on disk, content-addressed
        diag = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
        assert diag["diagnosis"]["root_cause"]["error_type"] == "ECCError"
    assert client.get(f"/v1/jobs/{job}/log", headers=sched).json()["encoding"] == "zstd"


def test_an_empty_or_shorter_upload_never_silently_replaces_the_log(app, client, sched):
    job = _job(client, sched)
    full = client.put(f"/v1/jobs/{job}/log", content=sample_log(), headers=sched).json()
    err = assert_error(client.put(f"/v1/jobs/{job}/log", content=b"", headers=sched), 422, "empty_log")
    assert "empty" in err["message"]
    short = sample_log()[:100]
    err = assert_error(client.put(f"/v1/jobs/{job}/log", content=short, headers=sched), 409, "log_shrinks")
    assert err["detail"] == {"log_id": full["id"], "size": full["size"], "new_size": 100}
    assert "replace=true" in err["message"]
    current = client.get(f"/v1/jobs/{job}/log", headers=sched).json()
    assert (current["id"], current["sha256"], current["size"]) == (full["id"], full["sha256"], full["size"])
    spool = app.state.services.settings.data_dir / "spool"
    assert not any(spool.iterdir())  # refused bodies leave nothing behind
    # asked for explicitly, the shorter log becomes current; the earlier one stays on disk
    replaced = client.put(f"/v1/jobs/{job}/log", content=short, headers=sched, params={"replace": "true"})
    assert replaced.status_code == 201 and replaced.json()["size"] == 100
    assert app.state.services.store.blob_path(full["sha256"]).read_bytes() == sample_log()
    # the same or a longer log is accepted as usual
    assert client.put(f"/v1/jobs/{job}/log", content=sample_log(), headers=sched).status_code == 201


def test_same_content_is_stored_once(app, client, sched):
    a, b = _job(client, sched), new_job(client, sched, external_id="other")["id"]
    s1 = client.put(f"/v1/jobs/{a}/log", content=sample_log(), headers=sched).json()["sha256"]
    s2 = client.put(f"/v1/jobs/{b}/log", content=sample_log(), headers=sched).json()["sha256"]
    assert s1 == s2
    blobs = [p for p in app.state.services.store.blob_dir.rglob("*") if p.is_file()]
    assert len(blobs) == 1


def test_corrupt_gzip_is_stored_as_given_and_marked(app, client, sched):
    job = _job(client, sched)
    body = bytearray(gz(sample_log(400)))
    body[40:60] = b"\xff" * 20
    resp = client.put(f"/v1/jobs/{job}/log", content=bytes(body), headers=sched)
    assert resp.status_code == 201, resp.text
    kept = resp.json()
    assert kept["status"] == "corrupt" and "gzip" in kept["error"]
    assert app.state.services.store.blob_path(kept["sha256"]).read_bytes() == bytes(body)
    assert client.get(f"/v1/jobs/{job}/log", headers=sched).json()["status"] == "corrupt"


def test_truncated_gzip_is_accepted_with_a_warning(client, sched):
    job = _job(client, sched)
    body = gz(sample_log(400))
    resp = client.put(f"/v1/jobs/{job}/log", content=body[: len(body) // 2], headers=sched)
    assert resp.status_code == 201
    assert any("truncated" in w for w in resp.json()["warnings"])
    diag = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    assert diag["status"] == "done"


def test_binary_junk_still_diagnoses(client, sched):
    job = _job(client, sched)
    junk = os.urandom(20_000).replace(b"\x1f\x8b", b"xx") + b"\x00\x00" + sample_log(5) + os.urandom(500)
    assert client.put(f"/v1/jobs/{job}/log", content=junk, headers=sched).status_code == 201
    diag = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    assert diag["status"] == "done"
    assert diag["diagnosis"]["root_cause"]["error_type"] == "ECCError"


def test_wrong_content_type_is_415(client, sched):
    job = _job(client, sched)
    resp = client.put(f"/v1/jobs/{job}/log", json={"log": "x"}, headers=sched)
    assert_error(resp, 415, "unsupported_media_type")
    resp = client.put(f"/v1/jobs/{job}/log", files={"f": ("a.log", b"x")}, headers=sched)
    assert_error(resp, 415)


def test_curl_default_content_type_is_taken_as_the_raw_log(client, sched):
    body = b"[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    resp = client.post("/v1/diagnose", content=body,
                       headers={**sched, "Content-Type": "application/x-www-form-urlencoded"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["root_cause"]["error_type"] == "ECCError"


def test_unknown_job_upload_is_404(client, sched):
    assert_error(client.put("/v1/jobs/4242/log", content=b"x", headers=sched), 404)


def test_too_large_is_413_and_leaves_nothing(app, client, sched):
    job = _job(client, sched)
    limit = app.state.services.settings.max_upload_bytes
    assert_error(client.put(f"/v1/jobs/{job}/log", content=b"a" * (limit + 1), headers=sched), 413)

    def stream():  # no Content-Length: the limit is enforced while reading
        for _ in range(limit // 65536 + 2):
            yield b"b" * 65536

    assert_error(client.put(f"/v1/jobs/{job}/log", content=stream(), headers=sched), 413)
    assert list(app.state.services.store.spool_dir.iterdir()) == []
    assert_error(client.get(f"/v1/jobs/{job}/log", headers=sched), 404)


def test_chunks_append_idempotently(app, client, sched):
    job = _job(client, sched)
    data = sample_log(200)
    parts = [data[:1000], data[1000:2500], data[2500:]]
    url = f"/v1/jobs/{job}/log/chunks"
    assert client.post(url, params={"offset": 0}, content=parts[0], headers=sched).json()["size"] == 1000
    # the same bytes again: no-op
    assert client.post(url, params={"offset": 0}, content=parts[0], headers=sched).json()["size"] == 1000
    # a gap: 409 with the offset to resume from
    err = assert_error(client.post(url, params={"offset": 2500}, content=parts[2], headers=sched), 409, "offset_gap")
    assert err["detail"]["offset"] == 1000
    # overlap with different bytes: 409
    err = assert_error(client.post(url, params={"offset": 500}, content=b"X" * 600, headers=sched), 409,
                       "offset_mismatch")
    assert err["detail"]["offset"] == 1000
    # overlap with the same bytes that extends: the new tail is appended
    resp = client.post(url, params={"offset": 500}, content=data[500:2500], headers=sched)
    assert resp.json()["size"] == 2500 and resp.json()["status"] == "receiving"
    # a diagnosis while the job runs sees the log so far
    diag = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    assert diag["log_bytes"] == 2500 and diag["status"] == "done"
    final = client.post(url, params={"offset": 2500, "final": True}, content=parts[2], headers=sched).json()
    assert final["status"] == "complete" and final["size"] == len(data) and final["sha256"]
    assert app.state.services.store.blob_path(final["sha256"]).read_bytes() == data
    # replaying the last chunk after completion is still a no-op; more bytes are refused
    assert client.post(url, params={"offset": 2500}, content=parts[2], headers=sched).status_code == 200
    assert_error(client.post(url, params={"offset": len(data)}, content=b"more", headers=sched), 409, "log_complete")
    assert diag["diagnosis"]["root_cause"]["error_type"] != "ECCError"  # not in the first 2500 bytes
    again = client.post(f"/v1/jobs/{job}/diagnoses", headers=sched).json()
    assert again["log_bytes"] == len(data)
    assert again["diagnosis"]["root_cause"]["error_type"] == "ECCError"


def test_first_chunk_must_start_at_zero(client, sched):
    job = _job(client, sched)
    err = assert_error(client.post(f"/v1/jobs/{job}/log/chunks", params={"offset": 5}, content=b"x",
                                   headers=sched), 409)
    assert err["detail"]["offset"] == 0


def test_chunked_size_limit(app, client, sched):
    job = _job(client, sched)
    limit = app.state.services.settings.max_upload_bytes
    url = f"/v1/jobs/{job}/log/chunks"
    assert client.post(url, params={"offset": 0}, content=b"a" * (limit - 10), headers=sched).status_code == 200
    assert_error(client.post(url, params={"offset": limit - 10}, content=b"a" * 11, headers=sched), 413)
