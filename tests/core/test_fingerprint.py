import io

from app.core.fingerprint import fingerprint, mask_text
from app.core.pipeline import Pipeline

_PIPELINE = Pipeline()


def _diagnose(text: str):
    return _PIPELINE.diagnose(io.BytesIO(text.encode()), workers=1).diagnosis


def test_mask_removes_volatile_parts_and_launcher_prefixes():
    a = mask_text("[rank3]: RuntimeError: CUDA error at 0x7f3a12 on node-12.cluster at 2024-01-02 03:04:05")
    b = mask_text("[rank17]: RuntimeError: CUDA error at 0x7f3b99 on node-40.cluster at 2024-02-03 09:09:09")
    assert a == b
    assert "CUDA error" in a and "rank" not in a


def test_same_failure_on_other_rank_and_host_has_one_fingerprint():
    log1 = "step 10 loss 2.1\n[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    log2 = "step 99 loss 1.7\n[rank12]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    assert fingerprint(_diagnose(log1)) == fingerprint(_diagnose(log2))


def test_different_failures_have_different_fingerprints():
    ecc = "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.jsonl'\n"
    assert fingerprint(_diagnose(ecc)) != fingerprint(_diagnose(missing))


def test_line_prefixes_of_launchers_and_loggers_are_ignored():
    core = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    prefixes = ["", "node-12: ", "[rank3]: ", "[rank3]:[E1204 03:00:01.123456 1234 ProcessGroupNCCL.cpp:1] ",
                "2026-12-04 03:00:01,123 node-12 [rank 3] ", "[1,3]<stderr>:", "3: ", "[default3]:",
                "gpu-a-017.cluster.local: ", "Dec  4 03:00:01 gpu-a-017 kernel: ", "[2026-12-04T03:00:01Z] [pid 4242] ",
                "srun: error: gpu-a-017: task 3: ", "gpu-a-017:4242:4301 [3] ", "I1204 03:00:01.123456 4242 train.py:88] ",
                "(pid=4242, ip=10.0.0.7) ", "rank3: ", "10.0.0.7: "]
    assert {mask_text(p + core) for p in prefixes} == {"CUDA error: uncorrectable ECC error encountered"}
    # what the message says is kept
    assert mask_text("node-3: CUDA out of memory. Tried to allocate 2.00 GiB") == "CUDA out of memory. Tried to allocate <n> GiB"
    assert mask_text("node-3: 42") == "<n>"  # nothing but a prefix and a number: the masked line, not ""
