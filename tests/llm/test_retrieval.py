import pytest

from app.core.types import ActionKind, Category, ErrorType
from app.llm.ports import InMemoryCaseStore
from app.llm.retrieval import Retriever, failure_signature, normalise, vote

from tests.llm.conftest import make_result


def test_signature_is_normalised_and_ordered():
    sig = failure_signature(make_result())
    assert sig.splitlines()[0].startswith("OutOfMemoryError (cause)")
    assert "2.00" not in sig and "N.N GiB" in sig
    assert normalise("at 0xdeadbeef in /a/b/c.py:12") == "at HEX in c.py:N"


def test_minilm_retrieves_the_same_failure_family(minilm):
    store = InMemoryCaseStore()
    retr = Retriever(minilm, store, k=3, min_similarity=0.3)

    class R:
        def __init__(self, text):
            self.events = []
            self.compressed = type("C", (), {"flagged_lines": [(1, text)], "text": text})()

    retr.add_labelled("oom", R("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"),
                      error_type=ErrorType.OutOfMemoryError, category=Category.FRAMEWORK,
                      action=ActionKind.NO_RETRY, human_confirmed=True)
    retr.add_labelled("disk", R("OSError: [Errno 28] No space left on device"),
                      error_type=ErrorType.OSError, category=Category.SCRIPT, action=ActionKind.NO_RETRY,
                      human_confirmed=False)
    retr.add_labelled("nccl", R("NCCL error: unhandled system error, NCCL version 2.18.1"),
                      error_type=ErrorType.NCCLRemoteError, category=Category.INFRASTRUCTURE,
                      action=ActionKind.RETRY, human_confirmed=True)
    found = retr.similar(R("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total)"))
    assert found[0].case.case_id == "oom"
    assert all(f.case.vector.dtype.name == "float32" for f in found)
    assert retr.similar(R("OSError: [Errno 28] No space left on device: '/ckpt'"), exclude=frozenset({"disk"}))[0].case.case_id != "disk"


def test_vote_needs_agreement():
    from app.llm.ports import LabelledCase, SimilarCase
    import numpy as np

    def sc(t, sim, confirmed=True):
        return SimilarCase(LabelledCase("x", "", np.zeros(1, np.float32), t, Category.FRAMEWORK,
                                        ActionKind.NO_RETRY, confirmed), sim)

    assert vote([sc(ErrorType.OutOfMemoryError, 0.9), sc(ErrorType.OutOfMemoryError, 0.8)]).error_type is ErrorType.OutOfMemoryError
    assert vote([sc(ErrorType.OutOfMemoryError, 0.9), sc(ErrorType.OSError, 0.9)]) is None
    assert vote([sc(ErrorType.OutOfMemoryError, 0.5)]) is None  # too far
