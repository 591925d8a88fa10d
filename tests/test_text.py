"""L3: outside text is made storable once, at the boundary."""

from core.text import REPLACEMENT, storable_json, storable_text


def test_l3_storable_text_replaces_nul_and_unpaired_surrogates():
    # given
    hostile = "a\x00b\ud800c\udfffd"
    # when
    clean = storable_text(hostile)
    # then
    assert clean == f"a{REPLACEMENT}b{REPLACEMENT}c{REPLACEMENT}d"
    clean.encode("utf-8")  # encodable: no UnicodeEncodeError


def test_l3_storable_text_keeps_clean_text_as_it_is():
    text = "普通の文字 😀 @Alice\n\tcode"
    assert storable_text(text) is text


def test_l3_storable_json_cleans_every_string_keys_included():
    value = {"k\x00": ["x\ud800", {"n": 1, "s": "ok"}], "b": True, "none": None}
    assert storable_json(value) == {
        f"k{REPLACEMENT}": [f"x{REPLACEMENT}", {"n": 1, "s": "ok"}],
        "b": True,
        "none": None,
    }
