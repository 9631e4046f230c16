"""A stall's evidence quotes the line it names: the last line of the log, not the first of its shape."""

from __future__ import annotations

import io

from app.core.pipeline import Pipeline


def test_startup_hang_evidence_pairs_last_line_with_its_own_text():
    log = b"worker heartbeat 1\nworker heartbeat 2\nworker heartbeat 3\n"
    root = Pipeline().diagnose(io.BytesIO(log), workers=1).diagnosis.root_cause
    assert root.error_type == "Unknown"  # no error, no progress: "no failure found", naming the last line
    assert [(e.line, e.text) for e in root.evidence] == [(3, "worker heartbeat 3")]


def test_last_text_survives_merging_byte_ranges(tmp_path):
    from app.core.compressed import merge_partials
    from app.core.compressor import Compressor

    pipeline = Pipeline()
    parts = []
    for chunk in (b"worker heartbeat 1\nworker heartbeat 2\n", b"worker heartbeat 3\nworker heartbeat 4\n"):
        comp = Compressor(pipeline.ruleset)
        comp.feed(chunk)
        parts.append(comp.partial())
    (tpl,) = merge_partials(parts).templates.values()
    assert (tpl.first_line, tpl.last_line, tpl.count) == (1, 4, 4)
    assert tpl.last_text == "worker heartbeat 4"
