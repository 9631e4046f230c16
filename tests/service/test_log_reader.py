"""The raw-log reader: line numbers across chunk boundaries and compressed blobs, the rank/host
filter, ranges that stop reading at their last line, secrets redacted."""

from __future__ import annotations

import gzip

import pytest
import zstandard

from app.logs import reader


def _log(n: int) -> bytes:
    return b"".join(f"[rank{i % 8}]: step {i} loss 2.{i % 10} {'x' * 40}\n".encode() for i in range(1, n + 1))


@pytest.mark.parametrize("pack", [lambda b: b, gzip.compress, lambda b: zstandard.ZstdCompressor().compress(b)])
def test_search_and_ranges_number_lines_as_the_pipeline_does(tmp_path, pack):
    data = _log(40_000)  # ~2.8 MB: several read chunks
    path = tmp_path / "log"
    path.write_bytes(pack(data))
    found = reader.search(path, "STEP 31337 ")
    assert found.total == 1 and found.matches[0].number == 31337
    assert found.matches[0].text.startswith("[rank1]: step 31337 ")
    ranked = reader.search(path, "loss 2.7", rank=3)
    assert ranked.total == 1000  # i % 10 == 7 and i % 8 == 3: one line in 40
    assert all(m.text.startswith("[rank3]:") for m in ranked.matches)
    assert len(reader.search(path, "step").matches) == reader.MAX_MATCHES
    shown, more = reader.lines(path, 29_990, 30_010)
    assert [ln.number for ln in shown] == list(range(29_990, 30_011)) and more
    assert shown[0].text.startswith("[rank6]: step 29990 ") and shown[0].rank == 6
    tail, more = reader.lines(path, 39_995, 40_100)
    assert [ln.number for ln in tail] == list(range(39_995, 40_001)) and not more


def test_secrets_are_redacted_in_what_is_shown(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"ok\nexport WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567\n")
    found = reader.search(path, "wandb")
    assert found.total == 1 and "0123456789abcdef0123" not in found.matches[0].text
