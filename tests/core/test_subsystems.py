"""The subsystem vocabulary (app/core/subsystems.py, rules/subsystems.yaml): a failure no rule
typed is named by the subsystem and the failure its line names, with a confidence too low to act
on; warning-level lines, runs that went on and typed failures are left alone. (Only lines the
compressor flags as error-looking are read: `error`, `failed`, `fatal`, `timed out`, and the
words of a loss without them: `lost`, `unreachable`, `preempted`, `halted`...)"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from app.core.pipeline import Pipeline
from app.core.rules import DEFAULT_RULES_DIR, RuleError, check_examples, load_rules
from app.core.subsystems import FRAMES_CONFIDENCE, VOCABULARY_CONFIDENCE, vocabulary_of


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


def run(pipe, text: str):
    return pipe.diagnose(io.BytesIO(text.encode())).diagnosis


def test_the_shipped_vocabulary_loads_and_its_examples_pass():
    rules = load_rules()
    assert {s.id for s in rules.subsystems} >= {"subsystem.gpu", "subsystem.node", "subsystem.network"}
    assert not [f for f in check_examples(rules) if f.source == "subsystems"]


@pytest.mark.parametrize("line, rule_id", [
    ("[  901.2] nvfoo 0000:3b:00.0: GPU 5 stopped responding, marking it unusable", "subsystem.gpu"),
    ("E1203 10:00:00.000 77 agent.cc:12] node trn1-17 lost: no heartbeat for 120 s", "subsystem.node"),
    ("ERROR parameter-server rpc to 10.0.0.4:6170 failed: connection reset", "subsystem.network"),
    ("FATAL: checkpoint upload to gs://ckpt/run7/step_900 failed (exit 1)", "subsystem.object-store"),
    ("ERROR: The replica master 0 ran out-of-memory and exited with a non-zero status of 247.",
     "subsystem.host-memory"),
    ("ERROR: GPU 2 ran out of memory while allocating 2.0 GiB", "subsystem.gpu-memory"),  # the device's own
    ("nccl_utils.cc:133: NCCL operation ncclGetUniqueId(&id) failed: Unable to load NCCL library.",
     "subsystem.library"),
])
def test_a_line_naming_a_subsystem_and_a_failure_is_typed_by_it(line, rule_id):
    got = vocabulary_of(load_rules()).type_line(line)
    assert got is not None and got.id == rule_id


@pytest.mark.parametrize("line", [
    "WARNING: the node gpu-17 was lost, continuing with 7 nodes",  # a warning: the program went on
    "W1203 10:00:00.000 77 agent.cc:12] rpc to 10.0.0.4 failed, retrying",  # glog W level
    "Loading /opt/rocm/lib/librccl.so failed",  # a path, not a subsystem named
    "ERROR: tokenizer config failed to parse",  # a failure of no subsystem in the vocabulary
    "connected to 8 peers",  # a subsystem without a failure
    "time=2024-12-31T01:21:28 level=WARN msg=\"gpu 3 failed to report its temperature\"",  # logfmt level
    "wandb: Network error resolved after 0:01:10.030828, resuming normal operation.",  # over
    "ERROR rpc to 10.0.0.4:6170 failed: connection reset, retrying in 5 s",  # retried
])
def test_warnings_paths_and_lines_without_both_are_not_typed(line):
    assert vocabulary_of(load_rules()).type_line(line) is None


def test_an_untyped_gpu_failure_is_named_but_investigated(pipe):
    lines = ["step 10 loss 2.31", "step 11 loss 2.30",
             "[ 5662.1] fooaccel 0000:3b:00.0: accelerator 3 halted: fatal firmware error",
             "Aborted (core dumped)"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "CUDAError" and d.root_cause.rule_id == "subsystem.gpu"
    assert d.root_cause.confidence == VOCABULARY_CONFIDENCE
    # not drained on a word: on the fresh sealed splits, letting the GPU and node entries isolate
    # isolated a run that had not failed and gained nothing overall
    assert d.action.kind == "investigate"
    assert "subsystem vocabulary" in d.root_cause.explanation


def test_an_object_store_failure_is_named_but_investigated(pipe):
    d = run(pipe, "step 10 loss 2.31\nERROR: upload of checkpoint to s3://bucket/ckpt/step_100 failed\nAborted\n")
    assert d.root_cause.error_type == "S3StorageError" and d.root_cause.rule_id == "subsystem.object-store"
    assert d.action.kind == "investigate" and "too weak to act on" in d.root_cause.explanation


def test_a_level_word_in_prose_is_no_level():
    line = "ERROR: GPU 3 failed to initialise, see the warning above"
    got = vocabulary_of(load_rules()).type_line(line)
    assert got is not None and got.id == "subsystem.gpu"


def test_a_loss_said_without_error_or_failed_is_read(pipe):
    # the compressor flags the words of a loss (`lost`, `preempted`, `halted`...) as error-looking
    d = run(pipe, "step 10 loss 2.31\nscheduler: node trn1-17 lost, rescheduling its pods\n")
    assert d.root_cause.error_type == "NodeFailure" and d.root_cause.rule_id == "subsystem.node"
    d = run(pipe, "step 10 loss 2.31\nfooaccel: accelerator 3 halted\n")
    assert d.root_cause.error_type == "CUDAError"


def test_the_lines_of_a_multi_line_warning_are_not_read(pipe):
    warn = ("2024-01-31 10:21:35.025511: W external/tsl/tsl/distributed_runtime/preemption/preemption_sync_manager.cc:170] "
            "Failed to retrieve preemption notice from coordination service: UNAVAILABLE: Socket closed")
    more = "Additional GRPC error information from remote target leader: connection failed, socket closed"
    d = run(pipe, "\n".join(["step 5 loss 1.0", warn, more]) + "\n")
    assert d.root_cause.error_type == "Unknown"
    # the same line with a severity of its own is read
    d = run(pipe, "\n".join(["step 5 loss 1.0", warn, "E0131 10:21:36.000 77 client.cc:9] " + more]) + "\n")
    assert d.root_cause.error_type == "NetworkError" and d.root_cause.rule_id == "errno.connection"


def test_the_most_causal_subsystem_wins_over_the_first_line(pipe):
    lines = ["ERROR rpc to worker 10.0.0.4:6170 failed: connection reset",
             "ERROR accelerator 2 halted unexpectedly"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "CUDAError" and d.root_cause.evidence[0].line == 2


def test_an_errno_string_types_its_own_line_whatever_device_the_line_names(pipe):
    # a line tagged with the accelerator whose failure is a reset connection fails on the network
    line = ("Exception in device=TPU:6: tensorflow/compiler/xla/xla_client/mesh_service.cc:331 : Failed to retrieve "
            "mesh configuration: Connection reset by peer (14)")
    d = run(pipe, line + "\n")
    assert (d.root_cause.error_type, d.root_cause.rule_id) == ("NetworkError", "errno.connection")
    # across lines the most causal subsystem still wins: a device's own failure before it
    d = run(pipe, "\n".join(["ERROR accelerator 2 halted unexpectedly", line]) + "\n")
    assert d.root_cause.error_type == "CUDAError" and d.root_cause.evidence[0].line == 1
    # without the errno the device's failure reads as the device's
    d = run(pipe, line.replace(": Connection reset by peer (14)", "") + "\n")
    assert d.root_cause.rule_id == "subsystem.gpu"


def test_a_level_before_a_bracketed_tag_is_the_lines_own_severity(pipe):
    # MIOpen logs `Error [Func]` among its `Warning [Func]` lines: the error line is no continuation
    lines = ["MIOpen(HIP): Warning [SQLiteBase] Unable to read system database file:/opt/rocm/miopen/share/miopen/db/"
             "gfx900_64.kdb Performance may degrade",
             "MIOpen(HIP): Error [BuildOcl] comgr status = INVALID_ARGUMENT (2) on the HIP device"]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.rule_id == "subsystem.gpu"
    # at warning level alone, nothing
    d = run(pipe, lines[0] + "\n" + lines[1].replace("Error [", "Warning [") + "\n")
    assert d.root_cause.error_type == "Unknown"


def test_a_typed_failure_and_a_run_that_went_on_are_left_alone(pipe):
    # a rule's own type stands
    d = run(pipe, "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert d.root_cause.rule_id != "subsystem.gpu" and d.root_cause.error_type == "CUDAError"
    # training went on after the error line: no failure
    steps = [f"step {i} loss 2.{i:02d}" for i in range(12, 20)]
    d = run(pipe, "\n".join(["ERROR rpc to 10.0.0.4:6170 failed: connection reset"] + steps) + "\n")
    assert d.root_cause.error_type == "Unknown"


def test_a_rule_of_last_resort_yields_to_a_subsystem_the_log_names(pipe):
    # a native CHECK that failed names an invariant: alone it is the library's internal error ...
    check = "F0105 23:50:34.026692   34204 nccl_all_reduce_thunk.cc:175] Check failed: reduction_kind.has_value()\n"
    d = run(pipe, "step 1 loss 2.3\n" + check)
    assert (d.root_cause.error_type, d.action.kind.value) == ("RuntimeError", "no_retry")
    assert d.root_cause.rule_id == "native-check-failed"
    # ... but a line that names the subsystem that failed reads the failure (at the vocabulary's
    # low confidence: investigate)
    node = "E1203 10:00:00.000 77 agent.cc:12] node trn1-17 lost: no heartbeat for 120 s\n"
    d = run(pipe, "step 1 loss 2.3\n" + node + check)
    assert d.root_cause.rule_id == "subsystem.node" and d.action.kind.value == "investigate"


def test_switched_off_the_line_stays_unknown():
    env = dict(os.environ, LOGDX_ABLATE="subsystems")
    import subprocess
    import sys
    code = ("import io; from app.core.pipeline import Pipeline; "
            "d = Pipeline().diagnose(io.BytesIO(b'ERROR accelerator 2 halted unexpectedly\\n')).diagnosis; "
            "print(d.root_cause.error_type)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "Unknown"


def test_a_malformed_entry_is_a_rule_error_naming_it(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    text = (rules / "subsystems.yaml").read_text().replace("nouns: '(?<![\\w./-])(?:cuda", "nouns: '(?<![\\w./-])(?:(cuda", 1)
    (rules / "subsystems.yaml").write_text(text)
    with pytest.raises(RuleError, match="subsystem.gpu|subsystems.yaml"):
        load_rules(rules, overlay=None)


# ---- a traceback the log ends in, cut before its exception line: read by its frames ----------
_CUT_HTTP = [
    "step 10 loss 2.31", "step 11 loss 2.30",
    "Traceback (most recent call last):",
    '  File "/opt/train/train.py", line 88, in <module>',
    "    tokenizer = AutoTokenizer.from_pretrained(name)",
    '  File "/opt/conda/lib/python3.10/site-packages/requests/adapters.py", line 486, in send',
    "    resp = conn.urlopen(",
    '  File "/opt/conda/lib/python3.10/site-packages/urllib3/connectionpool.py", line 790, in urlopen',
    "    response = self._make_request(",
]


def test_a_cut_traceback_in_an_http_client_is_a_connection_error_retried(pipe):
    d = run(pipe, "\n".join(_CUT_HTTP) + "\n")
    assert d.root_cause.error_type == "ConnectionError" and d.root_cause.rule_id == "frames.http-client"
    assert d.root_cause.confidence == FRAMES_CONFIDENCE and d.action.kind == "retry"
    assert "cut before its error line" in d.root_cause.explanation
    assert d.root_cause.evidence[0].text.strip().startswith('File "/opt/conda/lib/python3.10/site-packages/urllib3/')


def test_an_object_store_client_above_the_http_client_names_the_store(pipe):
    lines = _CUT_HTTP[:5] + [
        '  File "/usr/local/lib/python3.10/dist-packages/google/cloud/storage/blob.py", line 2242, in upload_from_file',
        "    created_json = self._do_upload(",
    ] + _CUT_HTTP[5:]
    d = run(pipe, "\n".join(lines) + "\n")
    assert d.root_cause.error_type == "S3StorageError" and d.root_cause.rule_id == "frames.object-store"


def test_the_same_traceback_with_its_exception_line_is_read_by_that_line(pipe):
    d = run(pipe, "\n".join(_CUT_HTTP) + "\nValueError: bad tokenizer name\n")
    assert d.root_cause.error_type == "ValueError" and not (d.root_cause.rule_id or "").startswith("frames.")


@pytest.mark.parametrize("after", [
    "step 12 loss 2.29\nstep 13 loss 2.28\nstep 14 loss 2.27\nstep 15 loss 2.26\n",  # training went on
    "some other output\n",  # the traceback is not what the log ends in
])
def test_a_traceback_the_log_does_not_end_in_is_not_read_by_frames(pipe, after):
    d = run(pipe, "\n".join(_CUT_HTTP) + "\n" + after)
    assert not (d.root_cause.rule_id or "").startswith("frames.")


def test_a_cut_traceback_at_teardown_or_a_lone_frame_is_not_read():
    vocab = vocabulary_of(load_rules())
    teardown = {1: "Traceback (most recent call last):",
                2: '  File "/usr/lib/python3.10/weakref.py", line 667, in _exitfunc',
                3: '  File "/opt/conda/lib/python3.10/site-packages/requests/sessions.py", line 589, in request'}
    assert vocab.type_cut_traceback(teardown, 3) is None
    lone = {1: "some output", 2: '  File "/opt/conda/lib/python3.10/site-packages/urllib3/response.py", line 9, in read'}
    assert vocab.type_cut_traceback(lone, 2) is None  # no header: two frames at least
    lone[3] = '  File "/opt/conda/lib/python3.10/ssl.py", line 1307, in recv_into'
    assert vocab.type_cut_traceback(lone, 3).rule_id == "frames.http-client"
    assert vocab.type_cut_traceback(lone, 3 + 5) is None  # the log goes on after it


def test_an_entry_with_both_readings_or_neither_is_a_rule_error(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    text = (rules / "subsystems.yaml").read_text()
    text = text.replace("    priority: 40\n    frames:", "    priority: 40\n    nouns: 'x'\n    failure: 'y'\n    frames:", 1)
    (rules / "subsystems.yaml").write_text(text)
    with pytest.raises(RuleError, match="one of the two"):
        load_rules(rules, overlay=None)


@pytest.mark.parametrize("line, rule_id", [
    ("pcclConnect failed with error: MASTER_CONNECTION_FAILED: MASTER_CONNECTION_FAILED", "subsystem.network"),
    ("E0512 10:00:00 rdzv.cc:88] join: status=PEER_CONNECTION_LOST", "subsystem.network"),
    ("FATAL: scheduler reported status NODE_LOST for worker 3", "subsystem.node"),
])
def test_a_status_name_that_says_what_failed_is_read_as_its_words(line, rule_id):
    got = vocabulary_of(load_rules()).type_line(line)
    assert got is not None and got.id == rule_id


@pytest.mark.parametrize("line", [
    "Error: CUDA_VISIBLE_DEVICES is not set",  # an environment variable names no failure
    "ERROR: NCCL_SOCKET_IFNAME=eth0 does not match any interface on this host",
    "ERROR: unknown option MASTER_CONNECTION_RETRIES",  # a name holding no failure word
])
def test_names_that_say_no_failure_stay_names(line):
    got = vocabulary_of(load_rules()).type_line(line)
    assert got is None or got.id not in ("subsystem.gpu", "subsystem.network")
