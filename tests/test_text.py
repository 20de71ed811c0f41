"""Token bytes to text: characters split over tokens, stop strings."""

from __future__ import annotations

from specllama.text import TextAssembler


def test_a_character_split_over_tokens_waits_until_whole():
    t = TextAssembler()
    assert t.push(b"caf") == "caf"
    assert t.push(b"\xc3") == ""  # first byte of an "é"
    assert t.push(b"\xa9!") == "\u00e9!"
    assert t.push("\U0001F600".encode()[:3]) == ""
    assert t.push("\U0001F600".encode()[3:]) == "\U0001F600"


def test_an_unfinished_character_at_the_end():
    t = TextAssembler()
    assert t.push(b"ok\xe2\x82") == "ok"
    assert t.flush() == "\ufffd"
    ignore = TextAssembler(errors="ignore")
    assert ignore.push(b"ok\xe2\x82") == "ok"
    assert ignore.flush() == ""


def test_stop_string_across_tokens_is_held_back_then_cut():
    t = TextAssembler(["END"])
    assert t.push(b"hello E") == "hello "  # "E" may begin "END"
    assert t.push(b"N") == ""
    assert t.push(b"Dless") == ""
    assert t.stopped and t.stop_word == "END"
    assert t.push(b"more") == "" and t.flush() == ""


def test_false_alarm_is_released():
    t = TextAssembler(["END"])
    assert t.push(b"an E") == "an "
    assert t.push(b"gg") == "Egg"
    assert t.flush() == ""
    assert not t.stopped and t.stop_word is None


def test_earliest_of_several_stop_strings():
    t = TextAssembler(["world", "lo w"])
    assert t.push(b"hello world") == "hel" and t.stop_word == "lo w"
    t = TextAssembler(["wz", "wo", "w"])  # two at one place: the first given
    assert t.push(b"hello world") == "hello " and t.stop_word == "wo"
