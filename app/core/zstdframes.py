"""Walk the frame structure of a zstd stream as its compressed bytes go by (RFC 8878, section 3).

zstandard's stream reader decodes fast and bounds its output per read, but it ends quietly on a
stream cut inside a frame. This walker reads only the headers (frame header, 3-byte block
headers, checksum, skippable frames) and skips block contents, so it costs a few Python steps per
128 KiB block; at the end of the input it tells whether the stream stopped on a frame boundary.
"""

from __future__ import annotations

_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # 0x184D2A50..0x184D2A5F
_DID_SIZE = (0, 1, 2, 4)


class FrameWalker:
    """Feed it the compressed bytes in order (`feed`); `complete` is True when the bytes so far
    end exactly at a frame boundary. `unknown` is set when a frame does not start with a zstd or
    skippable magic number (nothing more is checked then: the decoder reports that itself)."""

    def __init__(self) -> None:
        self._need = 4  # bytes still wanted for the current header, or to skip
        self._state = "magic"  # magic | fhd | header | block | content | checksum | skip_size | skip
        self._head = bytearray()
        self._checksum = False
        self._last = False
        self.unknown = False
        self.frames = 0  # frames ended so far (skippable ones too)

    @property
    def complete(self) -> bool:
        return self.unknown or (self._state == "magic" and not self._head and self.frames > 0)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        pos, n = 0, len(data)
        while pos < n and not self.unknown:
            if self._state in ("content", "skip"):  # bulk skip, no copy
                take = min(self._need, n - pos)
                pos += take
                self._need -= take
                if self._need == 0:
                    if self._state == "content":
                        self._block_end()
                    else:
                        self._frame_end()
                continue
            take = min(self._need - len(self._head), n - pos)
            self._head += data[pos:pos + take]
            pos += take
            if len(self._head) == self._need:
                self._header_done(bytes(self._head))
                self._head.clear()

    def _header_done(self, head: bytes) -> None:
        state = self._state
        if state == "magic":
            magic = int.from_bytes(head, "little")
            if magic == _ZSTD_MAGIC:
                self._state, self._need = "fhd", 1
            elif magic & 0xFFFFFFF0 == _SKIPPABLE:
                self._state, self._need = "skip_size", 4
            else:
                self.unknown = True
        elif state == "fhd":
            fhd = head[0]
            single = bool(fhd & 0x20)
            fcs_flag = fhd >> 6
            fcs = (1 if single else 0) if fcs_flag == 0 else (2, 4, 8)[fcs_flag - 1]
            self._checksum = bool(fhd & 0x04)
            rest = (0 if single else 1) + _DID_SIZE[fhd & 0x03] + fcs
            self._state, self._need = ("header", rest) if rest else ("block", 3)
        elif state == "header":
            self._state, self._need = "block", 3
        elif state == "block":
            word = int.from_bytes(head, "little")
            last, kind, size = word & 1, (word >> 1) & 3, word >> 3
            self._last = bool(last)
            content = 1 if kind == 1 else size  # RLE blocks carry one byte
            if content:
                self._state, self._need = "content", content
            else:
                self._block_end()
        elif state == "checksum":
            self._frame_end()
        elif state == "skip_size":
            size = int.from_bytes(head, "little")
            if size:
                self._state, self._need = "skip", size
            else:
                self._frame_end()

    def _block_end(self) -> None:
        if self._last:
            if self._checksum:
                self._state, self._need = "checksum", 4
            else:
                self._frame_end()
        else:
            self._state, self._need = "block", 3

    def _frame_end(self) -> None:
        self.frames += 1
        self._state, self._need = "magic", 4
