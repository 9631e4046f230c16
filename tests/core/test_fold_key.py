"""fold_key, a kept line's template key: the C path for ASCII text must give exactly the key of
the regex path (numbers to 0, hex to <hex>), or lines would fold differently with the extension
built than without it, and the range workers' templates would not merge."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.core import fields
from app.core.fields import fold_key, fold_key_re

pytestmark = pytest.mark.skipif(fields._fold_ascii is None, reason="C scan loop not built")

# the characters the two patterns care about, and a few they do not
ALPHABET = "0123456789abcdefABCDEFxXeE+-._ :/[]<>gz\t"


@pytest.mark.parametrize("text,key", [
    ("iteration 120/ 5000 | loss 2.345E+00 | lr 3e-4", "iteration 0/ 0 | loss 0 | lr 0"),
    ("ptr 0x7f3a2c00 at 0xZZ and 0x", "ptr <hex> at 0xZZ and 0x"),
    ("commit 3f2a9c1b7d4e5f60 ok", "commit <hex> ok"),
    ("not hex 3f2a9c1b7d4e5f60g nor _3f2a9c1b7d4e5f60", "not hex 0f0a0c0b0d0f0g nor _0f0a0c0b0d0f0"),
    ("version 1.2.3 and 4. and 5e and 6e+ and 7E-2x", "version 0.0 and 0. and 0e and 0e+ and 0x"),
    ("", ""),
])
def test_known_lines(text, key):
    assert fold_key(text) == key == fold_key_re(text)


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=120))
@example("a0x12")
@example("0x0x1")
@example("deadbeefcafe0x1")
@example("1e5e5.5.5")
def test_c_and_regex_give_the_same_key(text):
    assert fields._fold_ascii(text) == fold_key_re(text)


@given(st.text(max_size=60))
def test_non_ascii_text_takes_the_regex_path(text):
    if not text.isascii():
        assert fields._fold_ascii(text) is None
    assert fold_key(text) == fold_key_re(text)


def test_long_lines_use_the_heap_buffer():
    text = "0x1f " * 5000 + "deadbeefcafe12 " * 2000 + "3.5e+10"
    assert fields._fold_ascii(text) == fold_key_re(text)
