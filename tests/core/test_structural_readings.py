"""Readings that come from a log's structure, not from one message's words: the frames an
exception was raised in (app/core/exceptions.py `_data_side`), what a one-line wrapper carries
(app/core/rank.py `_wrapped_teardown`), syslog's host field under another locale
(app/core/fields.py), a container plugin's relayed errno (rules/catalog_pyxis.yaml) ranked above
the scheduler's drain it caused, and a distribution's parameter check as a diverged run."""

from __future__ import annotations

import io

import pytest

from app.core.fields import extract_host
from app.core.pipeline import Pipeline


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


def run(pipe, text: str):
    return pipe.diagnose(io.BytesIO(text.encode())).diagnosis


def _traceback(frame_path: str, final: str) -> str:
    return ("step 10 loss 2.31\n"
            "Traceback (most recent call last):\n"
            '  File "/work/train.py", line 40, in <module>\n'
            "    for batch in loader:\n"
            f'  File "{frame_path}", line 172, in group_by_keys\n'
            "    raise ValueError(msg)\n"
            f"{final}\n")


def test_a_generic_error_raised_inside_a_data_library_is_the_data(pipe):
    lib = "/usr/lib/python3/dist-packages/webdataset/tariterators.py"
    d = run(pipe, _traceback(lib, "ValueError: 000020003.jpg: duplicate file name in tar file jpg"))
    assert (d.root_cause.error_type, d.root_cause.rule_id) == ("DatasetLoadingError", "exc.exc-value:data-library")


def test_the_same_error_in_the_project_s_own_data_module_stays_the_code_s(pipe):
    own = "/work/project/data/datasets/tariterators.py"
    d = run(pipe, _traceback(own, "ValueError: 000020003.jpg: duplicate file name in tar file jpg"))
    assert d.root_cause.error_type == "ValueError"


def test_a_key_error_inside_a_data_library_stays_a_key_error(pipe):
    lib = "/opt/venv/lib/python3.11/site-packages/datasets/formatting/formatting.py"
    d = run(pipe, _traceback(lib, "KeyError: 'instruction'"))
    assert d.root_cause.error_type == "KeyError"


def test_syslog_host_under_a_cjk_locale():
    line = '4月 28 15:08:10 master-02 containerd[3862899]: time="x" level=error msg="StartContainer failed"'
    assert extract_host(line) == "master-02"
    assert extract_host("Jul 14 03:12:55 node-12 kernel: NVRM: Xid 79") == "node-12"
    assert extract_host("4月 28 is the day") is None


def test_the_cuda_error_note_alone_is_a_cuda_error(pipe):
    d = run(pipe, "step 3 loss 2.0\n[rank0]: CUDA kernel errors might be asynchronously reported at some other "
                  "API call, so the stacktrace below might be incorrect.\n[rank0]: For debugging consider "
                  "passing CUDA_LAUNCH_BLOCKING=1.\n")
    assert d.root_cause.error_type == "CUDAError" and d.action.kind == "investigate"


def test_the_cuda_error_note_under_a_teardown_error_is_that_teardown(pipe):
    text = ("Epoch [99 / Test]: Accuracy = 0.8823 | Loss = 0.79231\n"
            "Training completed.\n"
            "terminate called after throwing an instance of 'c10::CUDAError'\n"
            "  what():  CUDA error: driver shutting down\n"
            "CUDA kernel errors might be asynchronously reported at some other API call,so the stacktrace below "
            "might be incorrect.\n"
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n")
    d = run(pipe, text)
    assert d.root_cause.error_type == "Unknown"


def test_what_the_prolog_printed_types_it_before_the_drain(pipe):
    text = (" error: [job 1537] prolog failed status=126:0\n"
            " error: pyxis: child 767229 failed with error code: 1\n"
            " error: pyxis: printing enroot log file:\n"
            " error: pyxis:     mkdir: cannot create directory '/run/enroot': Permission denied\n")
    d = run(pipe, text)
    assert (d.root_cause.error_type, d.action.kind) == ("PermissionError", "no_retry")
    # the prolog's failure alone is the node Slurm drained
    d = run(pipe, "salloc: Prolog failure on node k003-006\n")
    assert d.root_cause.error_type == "NodeFailure" and "k003-006" in d.action.suspect_hosts


def test_a_distribution_given_nan_parameters_is_a_diverged_run(pipe):
    text = ("iteration 147 mean reward 12.1\n"
            "Traceback (most recent call last):\n"
            '  File "/work/ppo.py", line 88, in update\n'
            "    dist = Normal(mean, std)\n"
            "RuntimeError: normal expects all elements of std >= 0.0\n")
    d = run(pipe, text)
    assert d.root_cause.error_type == "NaNLoss"
