"""The tail of a CI log as the model reads it (sources/ci_logs.py): bounded memory,
decoded, cleaned of terminal control, the first cut line dropped."""

from __future__ import annotations

from coding_agent.sources.ci_logs import TailBuffer, last_lines, tail_budget


def test_the_buffer_keeps_only_the_last_bytes_and_says_it_cut() -> None:
    buffer = TailBuffer(10)
    buffer.feed(b"0123456")
    assert (buffer.data, buffer.cut) == (b"0123456", False)
    buffer.feed(b"789abcdef")
    assert (buffer.data, buffer.cut) == (b"6789abcdef", True)


def test_a_tail_that_starts_mid_line_drops_the_fragment() -> None:
    assert last_lines(b"ment\nfull line\nlast\n", 5, starts_mid_line=True) == "full line\nlast"
    assert last_lines(b"first\nsecond", 5, starts_mid_line=False) == "first\nsecond"
    assert last_lines(b"only a fragment", 5, starts_mid_line=True) == "only a fragment"


def test_only_the_last_lines_are_kept() -> None:
    data = b"".join(b"line %d\n" % n for n in range(100))
    assert last_lines(data, 2, starts_mid_line=False) == "line 98\nline 99"
    assert last_lines(data, 0, starts_mid_line=False) == ""


def test_escapes_and_overwritten_lines_are_shown_as_a_terminal_shows_them() -> None:
    data = (
        b"\x1b[0Ksection_start:1:build\r\x1b[0K\x1b[32;1mok\x1b[0;m\r\n"
        b"\x1b]8;;http://evil.example\x07link\x1b]8;;\x07 text\n"
        b"bad \xc3\x28 byte\n"
        b"nul\x00 bell\x07 tab\there\n"
    )
    assert last_lines(data, 5, starts_mid_line=False) == "ok\nlink text\nbad \ufffd( byte\nnul bell tab\there"


def test_the_budget_grows_with_lines_and_is_capped() -> None:
    assert tail_budget(200) == 200 * 1024
    assert tail_budget(0) == 1024
    assert tail_budget(10**9) == 4 * 1024 * 1024
