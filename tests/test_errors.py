"""grpo.errors.first_line: every error-to-one-line of the project goes through it."""

from __future__ import annotations

from grpo.errors import first_line


def test_first_line_is_the_first_non_blank_line():
    assert first_line(RuntimeError("\n  disk full \nsecond line")) == "disk full"
    assert first_line("plain message\nmore") == "plain message"


def test_an_empty_message_gives_the_class_name_never_an_index_error():
    assert first_line(AssertionError()) == "AssertionError"
    assert first_line(ValueError("   \n")) == "ValueError"
    assert first_line(AssertionError(), typed=True) == "AssertionError"
    assert first_line("") == ""


def test_typed_and_limit():
    assert first_line(KeyError("x" * 300), 10, typed=True) == "KeyError: 'xxxxxxxxx"
    assert first_line(OSError("no space left"), typed=True) == "OSError: no space left"
