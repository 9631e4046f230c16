"""Telling binary junk from text, cheaply, before the per-line work.

A log file sometimes holds megabytes of binary data (a core dump or a checkpoint written to
stdout, NUL padding after a crash). Every random line is a new shape, so it would reach the
rules one by one (seconds per MB) and the error heuristics would find "nan" in it. A chunk is
judged from a sample of it: the share of control bytes (other than tab, LF, CR, ESC) plus
invalid UTF-8 sequences. In a binary chunk only the lines that look like text are read.
"""

from __future__ import annotations

NONTEXT = bytes(b for b in range(256) if (b < 32 and b not in (9, 10, 13, 27)) or b == 127)
BINARY_SHARE = 0.30  # random bytes score about 0.5, UTF-8 text (any script, ANSI colours) about 0
SAMPLE_WINDOWS = 16
WINDOW = 4096
MIN_TEXT_LINE = 16  # shorter "text" in binary junk is mostly chance (random bytes that decode)
BINARY_RULE_ID = "binary-data"  # the dropped_by_rule key of skipped binary lines


def nontext_share(buf: bytes | bytearray, length: int) -> float:
    """Share of non-text bytes in a sample of the first `length` bytes of `buf`."""
    if length <= 0:
        return 0.0
    if length <= SAMPLE_WINDOWS * WINDOW:
        sample = bytes(buf[:length])
    else:
        step = length // SAMPLE_WINDOWS
        sample = b"".join(bytes(buf[k * step: k * step + WINDOW]) for k in range(SAMPLE_WINDOWS))
    control = len(sample) - len(sample.translate(None, NONTEXT))
    invalid = sample.decode("utf-8", "replace").count("\ufffd")  # window edges add at most 2 each
    return (control + invalid) / len(sample)


def is_text_line(line: bytes) -> bool:
    """At least MIN_TEXT_LINE bytes, no control bytes, at most 10% invalid UTF-8: worth reading
    even inside a binary chunk (random bytes pass with odds far below 1e-5)."""
    if len(line) < MIN_TEXT_LINE or len(line.translate(None, NONTEXT)) != len(line):
        return False
    return line.decode("utf-8", "replace").count("\ufffd") * 10 <= len(line)
