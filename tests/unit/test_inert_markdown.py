"""`inert_markdown`: the model's words in the host's markdown render as words, and do nothing else."""

from __future__ import annotations

import html
import re

from hypothesis import given
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from coding_agent.agent.markdown import JOINER, inert_line, inert_markdown

# GitHub's and GitLab's mention rule: an `@` not after a word character, then a name.
MENTION = re.compile(r"(?<!\w)@[A-Za-z0-9_]")
RENDERER = MarkdownIt("commonmark")  # raw HTML passes through, as it would without escaping


def _render(words: str) -> tuple[str, str]:
    """(HTML, its text) of `words` inside a line of the host's, as a checklist item holds them."""
    rendered = RENDERER.render(f"- [ ] `a1` {inert_markdown(words)} ❌ failed")
    return rendered, html.unescape(re.sub(r"<[^>]+>", "", rendered))


def test_html_images_links_and_mentions_read_as_words() -> None:
    words = "Ping @org/team <img src=http://x/t.png> [link](http://evil) ![i](http://x/i.png) <http://x> &#64;bob `code`"
    rendered, text = _render(words)
    assert re.findall(r"<(\w+)", rendered) == ["ul", "li", "code"], rendered
    assert MENTION.search(text) is None and "http://" not in text and "www." not in text
    assert words in text.replace(JOINER, "")


def test_plain_words_are_unchanged() -> None:
    assert inert_markdown("Add the --json flag to cli.py (tests: 3/3)") == "Add the --json flag to cli.py (tests: 3/3)"


def test_bare_addresses_are_not_autolinked() -> None:
    assert inert_markdown("see https://evil.example and www.evil.example") == (
        f"see https{JOINER}://evil.example and www{JOINER}.evil.example"
    )


@given(st.lists(st.sampled_from(list("<>[]()!@&#;`\\/:. aZ1-=\"'*_~|") + ["img ", "http", "www", "&lt;", "src="]), max_size=20))
def test_no_tag_link_or_mention_comes_from_the_words(parts: list[str]) -> None:
    words = "".join(parts).strip()
    rendered, text = _render(words)
    assert re.findall(r"<(\w+)", rendered) == ["ul", "li", "code"], rendered
    assert MENTION.search(text) is None
    assert text.replace(JOINER, "").strip() == f"[ ] a1 {words} ❌ failed".strip()


@given(st.lists(st.sampled_from(list("<>[]()!@&#;`\\/:.\n aZ1-+=|\"'*_~") + ["## ", "> ", "1. ", "---", "http", "\n\n"]), max_size=20))
def test_an_inert_line_opens_no_block_in_a_list_item(parts: list[str]) -> None:
    """`inert_line`: a CI check's name as "CI still fails" lists it (`- NAME: CONCLUSION`):
    whatever its lines hold, one list item of words, no heading, quote, nested list,
    break, link or mention (SPEC 15 "Speak through CI")."""
    words = "".join(parts)
    rendered = RENDERER.render(f"- {inert_line(words, 200)}: failure")
    text = html.unescape(re.sub(r"<[^>]+>", "", rendered))
    assert re.findall(r"<(\w+)", rendered) in (["ul", "li"], ["ul", "li", "p"]), rendered
    assert MENTION.search(text) is None and "#1" not in text
    assert text.replace(JOINER, "").strip() == f"{' '.join(words.split())}: failure".strip()
