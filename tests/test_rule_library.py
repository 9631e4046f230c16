"""The shipped diagnosis rule library (rules/*.yaml, kind: diagnosis) as data under test.

Loads the real `rules/` directory and pins: every example passes, every canonical error type has
a rule, each Xid class maps to the expected type, normal training output matches nothing, and
every pattern runs under RE2 (the matcher's prefilter) unless allow-listed here with a reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import re2
import regex

from app.core.rules import DiagnosisRule, check_examples, load_rules
from app.core.types import ErrorType, Role

DATA = Path(__file__).parent / "data"

# Types no diagnosis rule has to produce: Hang/LossSpike come from progress and metrics in code,
# Unknown is the fallback, ChildFailedError is a symptom-only class.
NOT_REQUIRED = {ErrorType.Hang, ErrorType.LossSpike, ErrorType.Unknown, ErrorType.ChildFailedError}

# rule id -> why its pattern cannot be RE2 (lookaround, backreference, ...). Keep empty if possible.
RE2_ALLOWED: dict[str, str] = {}


@pytest.fixture(scope="module")
def rules() -> list[DiagnosisRule]:
    return load_rules().diagnosis


def best_rule(rules: list[DiagnosisRule], line: str) -> DiagnosisRule | None:
    """The rule the engine would pick for a line: the highest priority among the matches."""
    hits = [r for r in rules if r.regex.search(line, timeout=1.0)]
    return max(hits, key=lambda r: r.priority) if hits else None


def test_examples_pass() -> None:
    failures = check_examples(load_rules())
    msg = "\n".join(
        f"{f.source}: {f.rule_id}: {'should match' if f.expected_match else 'should NOT match'}: {f.example!r}"
        for f in failures)
    assert not failures, f"{len(failures)} rule example(s) fail:\n{msg}"


def test_every_rule_has_a_hint_and_a_near_miss(rules: list[DiagnosisRule]) -> None:
    missing = [r.id for r in rules if not r.spec.hint or not r.spec.examples.no_match]
    assert not missing, f"rules without a hint or a no_match example: {missing}"


def test_every_canonical_type_has_a_rule(rules: list[DiagnosisRule]) -> None:
    produced = {r.spec.error_type for r in rules}
    missing = sorted(t.value for t in set(ErrorType) - NOT_REQUIRED - produced)
    assert not missing, f"no diagnosis rule produces: {missing}"


def test_files_cover_the_families() -> None:
    files = set(load_rules().files)
    expected = {"cuda.yaml", "xid.yaml", "nvlink.yaml", "nccl.yaml", "network.yaml", "storage.yaml",
                "python.yaml", "framework.yaml", "external.yaml", "slurm.yaml", "launcher.yaml"}
    assert expected <= files, f"missing rule files: {sorted(expected - files)}"


XID_LINES = [
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=2178, name=python, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address", 13, ErrorType.CUDAError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 31, pid=2178, name=python, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f9e_a0000000", 31, ErrorType.CUDAError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 43, pid=2178, name=python, Ch 00000008", 43, ErrorType.CUDAError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 45, pid=2178, name=python, Ch 00000008", 45, ErrorType.CUDAError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:b7:00): 48, pid=9122, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.", 48, ErrorType.ECCError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x000000000097c4a0) marked for remapping, reset gpu to activate.", 63, ErrorType.ECCError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 64, pid='<unknown>', name=<unknown>, Row Remapper Error: (0x0000000105a6e380) - All reserved rows for bank are remapped", 64, ErrorType.ECCError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:07:00): 74, pid=123, name=python, NVLink: fatal error detected on link 3(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)", 74, ErrorType.NVLinkError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.", 79, ErrorType.NodeFailure),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:86:00): 92, pid=1234, name=python, High single-bit ECC error rate detected", 92, ErrorType.ECCError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 94, pid=2178, name=python, Contained: SM (0x1). RST: No, D-RST: No", 94, ErrorType.ECCError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 95, pid=2178, name=python, Uncontained: FBHUB. RST: Yes, D-RST: No", 95, ErrorType.ECCError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 119, pid=3020, name=python, Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL)", 119, ErrorType.CUDAError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:dc:00): 144, pid=1818990, name=python3, NVLINK: SAW_MVB Nonfatal XC0 i0 Link 04", 144, ErrorType.NVLinkError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:dc:00): 149, pid=1818990, name=python3, NETIR_LINK_EVT  Fatal  XC0 i0 Link 04 (0x004505c6 0x00000000)", 149, ErrorType.NVLinkError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149", 149, ErrorType.NVLinkError),
    ("Jul 14 03:12:55 node-12 kernel: NVRM: Xid (PCI:0000:3b:00): 45, pid=2211, name=python, Ch 00000010 caused by previous Xid 94", 94, ErrorType.ECCError),
]


@pytest.mark.parametrize(("line", "xid", "etype"), XID_LINES, ids=[f"xid{x[1]}-{i}" for i, x in enumerate(XID_LINES)])
def test_xid_lines(rules: list[DiagnosisRule], line: str, xid: int, etype: ErrorType) -> None:
    rule = best_rule(rules, line)
    assert rule is not None, f"no rule matches {line!r}"
    assert rule.spec.error_type is etype, f"{rule.id} gives {rule.spec.error_type} for Xid {xid}"
    m = rule.regex.search(line)
    assert m.group("xid") == str(xid)
    assert m.group("host") == "node-12"
    assert m.group("gpu")


def test_xid_roles(rules: list[DiagnosisRule]) -> None:
    plain_45 = best_rule(rules, XID_LINES[3][0])
    assert plain_45.spec.role is Role.SYMPTOM
    app_fault = best_rule(rules, XID_LINES[0][0])
    ecc = best_rule(rules, XID_LINES[4][0])
    assert app_fault.priority < ecc.priority


def _normal_lines() -> list[str]:
    text = (DATA / "normal_lines.txt").read_text(encoding="utf-8")
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def test_normal_lines_match_nothing(rules: list[DiagnosisRule]) -> None:
    lines = _normal_lines()
    assert len(lines) >= 40
    hits = [(r.id, ln) for ln in lines for r in rules if r.regex.search(ln, timeout=1.0)]
    assert not hits, "diagnosis rules fire on normal output:\n" + "\n".join(f"{rid}: {ln!r}" for rid, ln in hits)


def test_patterns_run_under_re2(rules: list[DiagnosisRule]) -> None:
    bad = []
    for r in rules:
        text = r.regex.pattern if not r.regex.flags & regex.IGNORECASE else f"(?i:{r.regex.pattern})"
        try:
            re2.compile(text)
        except Exception as exc:  # re2.error and friends
            if r.id not in RE2_ALLOWED:
                bad.append(f"{r.source}: {r.id}: {exc}")
    assert not bad, "patterns RE2 cannot run (fix or add to RE2_ALLOWED with a reason):\n" + "\n".join(bad)
    assert set(RE2_ALLOWED) <= {r.id for r in rules}, "stale RE2_ALLOWED entries"


# Lines from the held-in real logs and common formats: the rule the engine picks must give this
# type and role. Guards the priority ordering between families (a specific rule must claim a line
# that also matches a generic exception rule).
PICKS = [
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", ErrorType.ECCError, Role.CAUSE),
    ("[rank2]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 336.00 MiB.", ErrorType.OutOfMemoryError, Role.CAUSE),
    ("RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8", ErrorType.NCCLRemoteError, Role.CAUSE),
    ("[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3763, remote process exited or there was a network error, NCCL version 2.28.8", ErrorType.NCCLRemoteError, Role.SYMPTOM),
    ("RuntimeError: NCCL communicator was aborted on rank 3.", ErrorType.NCCLTimeoutError, Role.SYMPTOM),
    ("[rank1]: subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.", ErrorType.CalledProcessError, Role.CAUSE),
    ("subprocess.CalledProcessError: Command '['/usr/bin/python3', 'train.py']' returned non-zero exit status 1.", ErrorType.ChildFailedError, Role.SYMPTOM),
    ("RuntimeError: DataLoader worker (pid 2256) is killed by signal: Aborted. ", ErrorType.DataloaderKilled, Role.CAUSE),
    ("RuntimeError: DataLoader worker (pid 2256) is killed by signal: Killed. ", ErrorType.DataloaderKilled, Role.CAUSE),
    ("OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached files", ErrorType.ModelLoadingError, Role.CAUSE),
    ("OSError: [Errno 28] No space left on device", ErrorType.OSError, Role.CAUSE),
    ("ValueError: Not able to read records in the JSON file at /data/train.json.", ErrorType.DatasetLoadingError, Role.CAUSE),
    ("Exception: Skipped 50 iterations in a row due to Overflow - Exiting training.", ErrorType.NaNLoss, Role.CAUSE),
    ("hdfsWrite: NewByteArray error: OutOfMemoryError: Java heap spacejava.lang.OutOfMemoryError: Java heap space", ErrorType.StorageError, Role.CAUSE),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", ErrorType.ChildFailedError, Role.SYMPTOM),
    ("  exitcode  : -9 (pid: 12345)", ErrorType.HostOOMKilled, Role.CAUSE),
    ("[15:58:29] WARNING  Sending process 197 closing signal SIGTERM", ErrorType.ChildFailedError, Role.SYMPTOM),
    ("slurmstepd: error: *** JOB 1 ON node-1 CANCELLED AT 2023-07-14T03:12:55 DUE TO NODE FAILURE ***", ErrorType.NodeFailure, Role.CAUSE),
    ("slurmstepd: error: *** JOB 1 ON node-1 CANCELLED AT 2023-07-14T03:12:55 DUE TO TIME LIMIT ***", ErrorType.Hang, Role.SYMPTOM),
    ("train.py: error: unrecognized arguments: --local-rank=0", ErrorType.ArgumentError, Role.CAUSE),
    ("wandb: Network error (ConnectTimeout), entering retry loop.", ErrorType.ConnectionError, Role.CAUSE),
    ("botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject operation", ErrorType.S3StorageError, Role.CAUSE),
    ("...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error", ErrorType.NetworkError, Role.CAUSE),
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices", ErrorType.RuntimeError, Role.CAUSE),
]


@pytest.mark.parametrize(("line", "etype", "role"), PICKS, ids=[f"pick{i}" for i in range(len(PICKS))])
def test_line_picks(rules: list[DiagnosisRule], line: str, etype: ErrorType, role: Role) -> None:
    rule = best_rule(rules, line)
    assert rule is not None, f"no rule matches {line!r}"
    assert (rule.spec.error_type, rule.spec.role) == (etype, role), f"picked {rule.id}"


def test_captures_rank_and_host(rules: list[DiagnosisRule]) -> None:
    cases = [
        ("[rank5]:[E ProcessGroupNCCL.cpp:563] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", {"rank": "5"}),
        ("[rank2]: torch.cuda.OutOfMemoryError: CUDA out of memory.", {"rank": "2"}),
        ("[rank7]: KeyError: 'input_ids'", {"rank": "7"}),
        ("gpu-node-07:5521:5611 [3] transport/net_ib.cc:97 NCCL WARN NET/IB : Got async event : port error", {"host": "gpu-node-07", "gpu": "3"}),
        ("Jul 14 03:12:55 node-12 kernel: Out of memory: Killed process 41234 (python) total-vm:1kB", {"host": "node-12", "pid": "41234"}),
    ]
    for line, want in cases:
        rule = best_rule(rules, line)
        assert rule is not None, line
        m = rule.regex.search(line)
        got = {k: m.group(k) for k in want}
        assert got == want, f"{rule.id} on {line!r}: {got}"
