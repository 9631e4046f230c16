from __future__ import annotations

import gzip
import io

import pytest
import zstandard

from app.core.ingest import InputError, IngestReport, iter_chunks, iter_file_buffers

LOG = b"".join(b"step %d loss 2.%d\n" % (i, i % 10) for i in range(50_000))


def read_all(source, **kw) -> tuple[bytes, IngestReport]:
    report = IngestReport()
    data = b"".join(iter_chunks(source, report, **kw))
    return data, report


@pytest.mark.parametrize("encode,encoding", [
    (lambda b: b, "plain"),
    (gzip.compress, "gzip"),
    (lambda b: zstandard.ZstdCompressor().compress(b), "zstd"),
])
def test_reads_every_encoding_by_magic_bytes(tmp_path, encode, encoding):
    path = tmp_path / "log.bin"  # no telling extension: detection is by content
    path.write_bytes(encode(LOG))
    data, report = read_all(path, chunk_size=4096)
    assert data == LOG
    assert report.encoding == encoding
    assert report.warnings == []


def test_chunks_end_on_newlines():
    chunks = list(iter_chunks(io.BytesIO(LOG), IngestReport(), chunk_size=1000))
    assert len(chunks) > 10
    assert all(c.endswith(b"\n") for c in chunks)


def test_concatenated_zstd_frames_are_all_read():
    z = zstandard.ZstdCompressor()
    blob = z.compress(LOG[:1000]) + z.compress(LOG[1000:])
    data, report = read_all(io.BytesIO(blob))
    assert data == LOG and not report.warnings


@pytest.mark.parametrize("compressor", [gzip.compress, lambda b: zstandard.ZstdCompressor().compress(b)])
def test_truncated_archive_keeps_what_was_read_and_warns(compressor):
    blob = compressor(LOG)
    data, report = read_all(io.BytesIO(blob[: len(blob) // 2]), chunk_size=64 * 1024)
    assert 0 < len(data) < len(LOG)
    assert LOG.startswith(data)
    assert len(report.warnings) == 1 and "truncated" in report.warnings[0]


def test_corrupt_gzip_body_warns_instead_of_raising():
    blob = bytearray(gzip.compress(LOG))
    blob[200:260] = b"\xff" * 60
    data, report = read_all(io.BytesIO(bytes(blob)))
    assert report.warnings and "gzip" in report.warnings[0]
    assert LOG.startswith(data)


def test_overlong_line_across_chunks_is_cut_and_marked():
    big = b"x" * (3 * 1024 * 1024)
    data, report = read_all(io.BytesIO(b"before\n" + big + b"\nafter\n"), chunk_size=256 * 1024, line_cap=65536)
    lines = data.split(b"\n")
    assert lines[0] == b"before" and lines[2] == b"after"
    assert lines[1].startswith(b"x" * 65536) and b"[logdx: line cut at 65536 bytes]" in lines[1]
    assert report.lines_cut == 1


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_all(tmp_path / "nope.log")
    with pytest.raises(InputError, match="not a regular file"):
        read_all(tmp_path)


def test_empty_input():
    data, report = read_all(io.BytesIO(b""))
    assert data == b"" and report.bytes_read == 0 and not report.warnings


def read_buffers(path, *args, **kw) -> tuple[bytes, IngestReport]:
    report = IngestReport()
    data = b"".join(bytes(buf[:n]) for buf, n in iter_file_buffers(path, report, *args, **kw))
    return data, report


@pytest.mark.parametrize("tail", [b"", b"last line without newline"])
def test_file_buffers_equal_the_file(tmp_path, tail):
    path = tmp_path / "log.txt"
    path.write_bytes(LOG + tail)
    data, report = read_buffers(path, chunk_size=4096)
    assert data == LOG + tail and report.bytes_read == len(LOG + tail)
    # byte ranges that start at line starts reassemble the file
    cut = LOG.index(b"\n", len(LOG) // 2) + 1
    parts = [read_buffers(path, a, b, chunk_size=4096)[0] for a, b in ((0, cut), (cut, len(LOG + tail)))]
    assert b"".join(parts) == LOG + tail


def test_file_buffers_cut_an_overlong_line(tmp_path):
    path = tmp_path / "log.txt"
    path.write_bytes(b"before\n" + b"x" * (3 * 1024 * 1024) + b"\nafter\n")
    data, report = read_buffers(path, chunk_size=256 * 1024, line_cap=65536)
    lines = data.split(b"\n")
    assert lines[0] == b"before" and lines[2] == b"after" and len(lines) == 4
    assert lines[1].endswith(b"[logdx: line cut at 65536 bytes]") and len(lines[1]) < 70_000
    assert report.lines_cut == 1


def test_file_buffers_of_an_empty_file(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    assert read_buffers(path)[0] == b""


@pytest.mark.parametrize("encode", [gzip.compress, lambda b: zstandard.ZstdCompressor().compress(b)])
def test_compressed_input_is_decoded_ahead_in_a_thread_and_stopped_when_abandoned(encode):
    import threading

    data = b"".join(b"line %d of a log that is long enough to span chunks\n" % i for i in range(200_000))
    report = IngestReport()
    chunks = iter_chunks(io.BytesIO(encode(data)), report, chunk_size=64 * 1024)
    first = next(chunks)
    assert any(t.name == "logdx-decompress" for t in threading.enumerate())
    chunks.close()  # the consumer stops early (deadline, ratio limit, error): the thread ends
    assert not any(t.name == "logdx-decompress" for t in threading.enumerate())
    assert data.startswith(first)
    report = IngestReport()
    assert b"".join(iter_chunks(io.BytesIO(encode(data)), report, chunk_size=64 * 1024)) == data
    assert report.bytes_read == len(data) and not report.warnings


# ---- decoded streams read into reused buffers by a thread (app/core/readahead.py) ------------

ENCODERS = {
    "plain": lambda b: b,
    "gzip": gzip.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "zstd-checksum-frames": lambda b: b"".join(
        zstandard.ZstdCompressor(write_checksum=True).compress(b[i:i + 300_000]) for i in range(0, len(b), 300_000)),
}


def read_decoded(source, *, process: bool = False, **kw) -> tuple[bytes, IngestReport]:
    """Every buffer's lines, by the decoding thread or (`process`) by a forked decoding process."""
    from app.core.readahead import DecodedBuffers

    report = IngestReport()
    with DecodedBuffers(source, report, decode_process=process, **kw) as buffers:
        data = b"".join(bytes(buf[:n]) for buf, n in buffers)
        if report.encoding != "plain":  # (a plain stream is always read by a thread: nothing to decode)
            assert buffers.decoder_kind == ("process" if process else "thread")
    return data, report


DECODERS = pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])


@DECODERS
@pytest.mark.parametrize("encoding", ENCODERS)
@pytest.mark.parametrize("tail", [b"", b"last line without newline"])
def test_decoded_buffers_equal_the_log(tmp_path, encoding, tail, process):
    path = tmp_path / "log.bin"
    path.write_bytes(ENCODERS[encoding](LOG + tail))
    data, report = read_decoded(path, chunk_size=4096, process=process)
    assert data == LOG + tail and report.bytes_read == len(LOG + tail) and not report.warnings
    assert report.encoding == encoding.split("-")[0]


@DECODERS
def test_decoded_buffers_cut_an_overlong_line_like_the_plain_file_reader(tmp_path, process):
    log = b"before\n" + b"x" * (3 * 1024 * 1024) + b"\nafter\n" + b"y" * 70_000 + b"\nend"
    plain = tmp_path / "log.txt"
    plain.write_bytes(log)
    expected, plain_report = read_buffers(plain, chunk_size=256 * 1024, line_cap=65536)
    for encode in ENCODERS.values():
        data, report = read_decoded(io.BytesIO(encode(log)), chunk_size=256 * 1024, line_cap=65536, process=process)
        assert data == expected and report.lines_cut == plain_report.lines_cut == 1


@DECODERS
@pytest.mark.parametrize("encoding", ["gzip", "zstd", "zstd-checksum-frames"])
def test_decoded_buffers_of_a_truncated_archive_keep_what_decodes_and_warn(encoding, process):
    blob = ENCODERS[encoding](LOG)
    for cut in (len(blob) // 3, len(blob) - 2):
        data, report = read_decoded(io.BytesIO(blob[:cut]), chunk_size=64 * 1024, process=process)
        assert 0 < len(data) < len(LOG) + 1 and LOG.startswith(data)
        assert len(report.warnings) == 1 and "truncated" in report.warnings[0]
        # the warning counts the bytes decoded before the cut (within one piece of the decoder)
        after = int(report.warnings[0].split(" after ")[1].split()[0])
        assert len(data) - 1024 * 1024 <= after <= len(data) + 64 * 1024, (after, len(data))


@DECODERS
def test_decoded_buffers_of_a_corrupt_zstd_body_warn(process):
    """(Frames with checksums, as the zstd tool writes them: without one, a damaged literal can
    decode to other bytes without any error.)"""
    blob = bytearray(ENCODERS["zstd-checksum-frames"](LOG))
    blob[len(blob) // 2: len(blob) // 2 + 40] = b"\xff" * 40
    data, report = read_decoded(io.BytesIO(bytes(blob)), chunk_size=64 * 1024, process=process)
    assert len(report.warnings) == 1 and "zstd stream is corrupt" in report.warnings[0]
    assert data and LOG.startswith(data[:300_000])


def test_decoded_buffers_stop_the_decoding_thread_when_abandoned():
    import threading

    from app.core.readahead import iter_decoded_buffers

    data = b"".join(b"line %d of a log that is long enough to span chunks\n" % i for i in range(200_000))
    it = iter_decoded_buffers(io.BytesIO(ENCODERS["zstd"](data)), IngestReport(), chunk_size=64 * 1024)
    buf, n = next(it)
    assert data.startswith(bytes(buf[:n]))
    assert any(t.name == "logdx-decode" for t in threading.enumerate())
    it.close()
    assert not any(t.name == "logdx-decode" for t in threading.enumerate())


def _big_zstd() -> bytes:
    return ENCODERS["zstd"](b"".join(b"line %d of a log that is long enough to span chunks\n" % i
                                     for i in range(400_000)))


def test_a_decoding_process_is_reaped_when_the_reading_is_abandoned():
    import os

    from app.core.readahead import DecodedBuffers

    buffers = DecodedBuffers(io.BytesIO(_big_zstd()), IngestReport(), chunk_size=64 * 1024, decode_process=True)
    pid = buffers._filler._pid
    buf, n = next(iter(buffers))
    assert bytes(buf[:n]).startswith(b"line 0 of") and buffers.decoder_kind == "process"
    buffers.close()  # (the child was waiting for a free buffer: it is stopped, not waited for)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_a_decoding_process_that_dies_is_an_error_naming_its_exit_code():
    import os
    import signal

    from app.core.readahead import DecodedBuffers

    with DecodedBuffers(io.BytesIO(_big_zstd()), IngestReport(), chunk_size=64 * 1024,
                        decode_process=True) as buffers:
        it = iter(buffers)
        next(it)
        os.kill(buffers._filler._pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match=r"decoding process died \(exit code -9\)"):
            for _ in it:  # (what it had sent before it died is read first)
                pass


@DECODERS
def test_an_error_in_the_decoder_is_raised_to_the_reader(process):
    """Not a data error (those are warnings): the source itself fails."""
    class Failing(io.BytesIO):
        def read(self, n=-1):
            if self.tell() > 200_000:
                raise ValueError("the source went away")
            return super().read(n)

    blob = ENCODERS["gzip"](b"".join(b"%d %x\n" % (i, (i * 2654435761) % 2**32) for i in range(400_000)))
    assert len(blob) > 400_000
    with pytest.raises(ValueError, match="the source went away"):
        read_decoded(Failing(blob), chunk_size=64 * 1024, process=process)


def test_zstd_frame_walker_knows_where_frames_end():
    from app.core.zstdframes import FrameWalker

    blob = (ENCODERS["zstd-checksum-frames"](LOG[:700_000])
            + (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"12345"  # a skippable frame
            + zstandard.ZstdCompressor(write_content_size=False).compress(LOG[:1000]))
    ends = []
    walker = FrameWalker()
    for i in range(len(blob)):  # one byte at a time: every header split at every place
        walker.feed(blob[i:i + 1])
        if walker.complete:
            ends.append(i + 1)
    assert ends[-1] == len(blob) and walker.frames == 5
    assert len(ends) == 5  # complete only at the end of each frame
    junk = FrameWalker()
    junk.feed(b"not zstd at all")
    assert junk.unknown
