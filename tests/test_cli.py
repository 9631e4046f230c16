"""The `logdx` CLI: JSON contract, exit codes, and bad input giving one clear line, no traceback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from app.core.types import Diagnosis

REPO = Path(__file__).resolve().parents[1]
NUMBERED = b"".join(b"line %d of the job\n" % i for i in range(200_000))
CASE = REPO / "tests" / "golden" / "realworld" / "010-oom-one-rank-then-nccl-watchdog-timeouts" / "log.txt"


def logdx(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO, input=stdin,
                          capture_output=True, timeout=120)


def test_diagnose_json_is_exactly_the_contract():
    out = logdx("diagnose", str(CASE), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    Diagnosis.from_json_dict(data)  # extra keys are forbidden by the model
    assert data["schema"] == "logdx.diagnosis/v1"
    assert set(data) >= {"root_cause", "co_occurring", "action", "decided_by", "compression", "last_progress", "versions"}
    assert data["root_cause"]["error_type"] == "OutOfMemoryError"


def test_diagnose_summary_is_readable():
    out = logdx("diagnose", str(CASE))
    assert out.returncode == 0
    assert b"OutOfMemoryError" in out.stdout and b"Action:" in out.stdout


SAMPLE = REPO / "examples" / "sample_job.log"  # an ECC error with co-occurring symptoms


def test_diagnose_summary_in_a_file_is_plain_text_one_line_per_item():
    """Written to a file or pipe (a Slurm epilog's output), the summary is plain text: no colour
    codes, lines not wrapped at 80 columns, the co-occurring errors as aligned columns."""
    data = json.loads(logdx("diagnose", str(SAMPLE), "--json").stdout)
    out = logdx("diagnose", str(SAMPLE))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    assert "\x1b[" not in out.stdout.decode()
    rc = data["root_cause"]
    assert lines[0] == f"{rc['error_type']} ({rc['category']}), confidence {rc['confidence']:.2f}"
    assert lines[1] == rc["explanation"] and len(lines[1]) > 80  # one line, however long
    header = next(i for i, line in enumerate(lines) if line.startswith("co-occurring"))
    assert lines[header].split("  ")[0] == "co-occurring" and lines[header].endswith("first line")
    rows = lines[header + 1: header + 1 + len(data["co_occurring"])]
    assert [row.split() for row in rows] == [[c["error_type"], c["role"], str(c["count"]), str(c["first_line"])]
                                             for c in data["co_occurring"]]
    column = lines[header].index("role")  # aligned under the header
    assert all(row[column - 2: column] == "  " and row[column] != " " for row in rows)
    assert lines[-1].startswith("Compression: ")


# an error line carrying terminal control sequences: a window-title OSC ended by BEL, an OSC 52
# clipboard write, a colour change and a C1 CSI
HOSTILE = ("[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered "
           "\x1b]0;owned\x07 \x1b]52;c;ZWNobyBoaQ==\x07 \x1b[31mred \u009b2J\n")


def _run_on_a_terminal(*args: str) -> str:
    import pty

    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(TERM="xterm-256color", COLUMNS="120")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=REPO, env=env,
                            stdout=secondary, stderr=subprocess.PIPE)
    os.close(secondary)
    chunks = []
    try:
        while True:
            try:
                piece = os.read(primary, 65536)
            except OSError:  # (EIO: the terminal's other end closed)
                break
            if not piece:
                break
            chunks.append(piece)
    finally:
        os.close(primary)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return b"".join(chunks).decode()


def test_control_sequences_in_a_log_are_shown_not_sent_to_the_terminal(tmp_path):
    log = tmp_path / "hostile.log"
    log.write_text("step 1 loss 2.0\n" + HOSTILE, encoding="utf-8")
    plain = logdx("diagnose", str(log)).stdout.decode()
    shown = "\\x1b]0;owned\\x07 \\x1b]52;c;ZWNobyBoaQ==\\x07 \\x1b[31mred \\x9b2J"
    assert shown in plain and "\x1b" not in plain and "\x07" not in plain and "\u009b" not in plain
    text = _run_on_a_terminal("diagnose", str(log), "--llm", "none")
    assert "CUDAError" in text and "\\x1b]52;c;" in text
    assert "\x1b]" not in text and "\x07" not in text and "\u009b" not in text  # (rich's own codes are CSI only)
    assert json.loads(logdx("diagnose", str(log), "--json").stdout)["root_cause"]["evidence"][0]["text"] \
        == HOSTILE.rstrip("\n")  # the contract keeps the line as it was


def test_diagnose_summary_on_a_terminal_is_rendered_in_colour():
    """On a terminal the same summary goes through `rich`: colour, and a drawn table."""
    text = _run_on_a_terminal("diagnose", str(SAMPLE))
    assert "\x1b[1;31mECCError\x1b[0m" in text  # the error type in bold red
    assert "\x1b[1mAction:\x1b[0m" in text
    assert "co-occurring" in text and "\u2502" in text  # the table, drawn


@pytest.mark.parametrize("encode", [gzip.compress, lambda b: zstandard.ZstdCompressor().compress(b)])
def test_stdin_and_compressed_input(encode):
    out = logdx("diagnose", "-", "--json", stdin=encode(CASE.read_bytes()))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["root_cause"]["error_type"] == "OutOfMemoryError"


def test_compress_writes_output_and_stats(tmp_path):
    dest = tmp_path / "out.txt"
    out = logdx("compress", str(CASE), "-o", str(dest), "--stats")
    assert out.returncode == 0
    assert "CUDA out of memory" in dest.read_text()
    stats = json.loads(out.stderr)
    assert stats["lines_in"] == 6 and stats["bytes_out"] > 0


@pytest.mark.parametrize("name,payload", [
    ("empty", b""),
    ("binary", os.urandom(200_000)),
    ("nuls", b"\x00" * 5000 + b"\nKeyError: 'x'\n\x00\x00"),
    ("bad-utf8", b"\xff\xfe\xfa RuntimeError: CUDA error: uncorrectable ECC error encountered \xc3\x28\n"),
    ("huge-line", b"y" * (10 * 1024 * 1024) + b"\n"),
    ("truncated-gz", gzip.compress(NUMBERED)[: len(gzip.compress(NUMBERED)) // 2]),
    ("truncated-zst", zstandard.ZstdCompressor().compress(NUMBERED)[:40_000]),
])
def test_bad_input_gives_a_result_not_a_traceback(tmp_path, name, payload):
    path = tmp_path / name
    path.write_bytes(payload)
    out = logdx("diagnose", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert b"Traceback" not in out.stderr
    data = json.loads(out.stdout)
    if name.startswith("truncated"):
        assert any("truncated" in w for w in data["compression"]["warnings"])
        assert data["compression"]["lines_in"] > 0


def test_compress_to_a_pipe_delivers_every_byte(tmp_path):
    """diagnose/compress end with os._exit (no interpreter teardown): what they printed must all
    reach the reader first, however much it is, and the exit code must be the command's."""
    def word(i: int) -> str:  # distinct lines without digits: none folds into another
        return "".join("abcdefghijklmnopqrstuvwxyz"[i // 26 ** k % 26] for k in range(4))

    log = tmp_path / "distinct.log"
    log.write_text("".join(f"widget {word(i)} said {word(i) * 8}\n" for i in range(30_000)))
    out = logdx("compress", str(log))
    assert out.returncode == 0, out.stderr
    body = out.stdout.decode()
    assert len(body) > 1_000_000  # more than a pipe holds: written while the reader drains it
    assert body.count("\n") >= 30_000 and body.rstrip("\n").endswith(word(29_999) * 8)
    assert logdx("compress", str(tmp_path / "missing.log")).returncode == 2


def test_an_output_that_cannot_be_written_is_exit_2_before_the_log_is_read(tmp_path):
    out = logdx("compress", str(CASE), "-o", str(tmp_path / "no-such-dir" / "out.txt"))
    assert out.returncode == 2
    err = out.stderr.decode()
    assert err.strip().count("\n") == 0 and "cannot write" in err and "no such directory" in err
    (tmp_path / "taken").mkdir()
    out = logdx("compress", str(CASE), "-o", str(tmp_path / "taken"))  # a directory (click says so)
    assert out.returncode == 2 and "is a directory" in out.stderr.decode()


def test_missing_file_is_exit_2_with_one_line(tmp_path):
    out = logdx("diagnose", str(tmp_path / "missing.log"))
    assert out.returncode == 2
    assert out.stderr.decode().strip().count("\n") == 0 and "no such file" in out.stderr.decode()


def test_usage_error_is_exit_2():
    assert logdx("diagnose").returncode == 2
    assert logdx("no-such-command").returncode == 2


def test_broken_rule_file_names_file_rule_and_pattern(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "kind: diagnosis\nfamily: bad\nrules:\n"
        "  - id: broken-one\n    error_type: CUDAError\n    pattern: 'CUDA error: (unclosed'\n"
        "    examples: {match: ['CUDA error: x']}\n")
    out = logdx("diagnose", str(CASE), "--rules", str(tmp_path))
    err = out.stderr.decode()
    assert out.returncode == 2
    assert "bad.yaml" in err and "broken-one" in err and "CUDA error: (unclosed" in err
    assert "Traceback" not in err


def test_rule_schema_forbids_unknown_keys(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "kind: diagnosis\nfamily: bad\nrules:\n"
        "  - id: typo-rule\n    error_type: CUDAError\n    patern: 'x'\n    pattern: 'x'\n"
        "    examples: {match: ['x']}\n")
    out = logdx("rules", "test", "--rules", str(tmp_path))
    assert out.returncode == 2 and b"typo-rule" in out.stderr and b"patern" in out.stderr


def test_rules_test_and_explain():
    out = logdx("rules", "test")
    assert out.returncode == 0, out.stdout.decode()[-2000:]
    assert b"examples pass" in out.stdout
    assert b"subsystem-vocabulary entries" in out.stdout
    out = logdx("rules", "explain", "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered")
    assert out.returncode == 0
    assert b"ECCError" in out.stdout
    # a line no rule knows: what the subsystem vocabulary would make of it
    out = logdx("rules", "explain", "ERROR fooaccel: accelerator 3 halted: fatal firmware error")
    assert out.returncode == 0
    assert b"no rule matches" in out.stdout and b"CUDAError (subsystem.gpu)" in out.stdout


def test_unknown_llm_backend_is_refused_with_one_line():
    env = {**os.environ, "LOGDX_LLM_BACKEND": "bogus"}
    out = subprocess.run([sys.executable, "-m", "app.cli", "diagnose", str(CASE)], cwd=REPO, env=env,
                         capture_output=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.decode().count("\n") == 1 and "llm_backend" in out.stderr.decode()


def test_dead_llm_endpoint_never_fails_the_diagnosis():
    env = {**os.environ, "LOGDX_LLM_BACKEND": "openai", "LOGDX_LLM_BASE_URL": "http://127.0.0.1:9/v1",
           "LOGDX_LLM_API_KEY": "sk-test", "LOGDX_LLM_TIMEOUT_S": "2", "LOGDX_LLM_MAX_RETRIES": "0"}
    unknown = REPO / "tests" / "golden" / "realworld" / "077-perlmutter-nccl-timeout-three-of-four-ranks" / "log.txt"
    out = subprocess.run([sys.executable, "-m", "app.cli", "diagnose", str(unknown), "--json"], cwd=REPO, env=env,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["decided_by"] == "rules" and data["root_cause"]["error_type"] == "NCCLTimeoutError"
    assert any("llm unavailable" in note for note in data["notes"])


def test_progress_bar_for_big_plain_and_compressed_files(tmp_path, monkeypatch):
    import gzip

    from app import cli as cli_mod

    monkeypatch.setattr(cli_mod, "PROGRESS_MIN_BYTES", 64 * 1024)
    plain = tmp_path / "job.log"
    plain.write_bytes(os.urandom(20 * 1024).hex().encode())  # 40 KiB: under the plain threshold
    packed = tmp_path / "job.log.gz"
    packed.write_bytes(gzip.compress(os.urandom(16 * 1024)))  # 16 KiB of gzip: would expand ~10x
    assert cli_mod._bar_total(str(plain)) is None
    assert cli_mod._bar_total(str(packed)) == packed.stat().st_size
    plain.write_bytes(b"x" * 70 * 1024)
    assert cli_mod._bar_total(str(plain)) == 70 * 1024
    assert cli_mod._bar_total("-") is None


def test_rules_explain_says_which_rule_wins_and_why(tmp_path):
    out = logdx("rules", "explain", "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered")
    last = out.stdout.decode().strip().splitlines()[-1]
    assert last.startswith("=> wins: cuda-ecc-uncorrectable (ECCError): the highest priority (95)"), last
    metric = " iteration      103/  500000 | consumed samples:        52736 | lm loss: 2.224691E+00 | grad norm: 1.198 |"
    last = logdx("rules", "explain", metric).stdout.decode().strip().splitlines()[-1]
    assert last.startswith("=> wins: megatron-iteration (filter metric)") and "dropped" in last, last
    # a tie on priority: the first rule in load order wins, and the filter never drops an error line
    (tmp_path / "d.yaml").write_text(
        "kind: diagnosis\nfamily: t\nrules:\n"
        "  - {id: a-first, error_type: CUDAError, priority: 60, pattern: 'boom', examples: {match: ['boom']}}\n"
        "  - {id: b-second, error_type: ECCError, priority: 60, pattern: 'boom now', examples: {match: ['boom now']}}\n")
    (tmp_path / "filters").mkdir()
    (tmp_path / "filters" / "f.yaml").write_text(
        "kind: filter\nfamily: t\nrules:\n"
        "  - {id: f-now, filter: chatter, pattern: 'now', examples: {match: ['now']}}\n")
    (tmp_path / "policies.yaml").write_text((REPO / "tests/data/rules_min/policies.yaml").read_text())
    out = logdx("rules", "explain", "boom now", "--rules", str(tmp_path))
    assert out.returncode == 0, out.stderr
    last = out.stdout.decode().strip().splitlines()[-1]
    assert "=> wins: a-first (CUDAError)" in last and "tied with b-second" in last
    assert "Not dropped although filter f-now matches" in last
