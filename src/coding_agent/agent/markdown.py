"""Model text the host puts into its own markdown on a forge, made inert (SPEC 15).

The progress comment and the planning checklist show the model's words (the plan's
goal, action descriptions and summaries, step comments, tool arguments) inside
markdown the host writes. Those words are untrusted: raw, `<img src=...>` would load a
tracker in every reader's browser, `[text](url)` would hide where a link goes, and
`@org/team` would ping a team with the bot's voice. `inert_markdown` keeps the words
and what they read as, and takes away what they would do:

- markdown's active characters (`\\`, backticks, `<`, `[`, `]`, `&`, `*`, `_`, `~`) are
  backslash-escaped: no HTML, no code span closing the host's, no link or image, no
  entity, no emphasis or strikethrough (`~~` is how the checklist marks a dropped action);
- an `@` before a name gets a zero-width joiner after it: no mention (GitHub and GitLab
  match the name right after the `@`; an escape would not help, they read the rendered text);
- bare URLs get the same joiner before `://`, and `www` before its dot: no autolink.

Redact before calling it: a secret with one of those characters would no longer read
as itself afterwards.
"""

from __future__ import annotations

import re

from coding_agent.domain.inert import JOINER

__all__ = ["inert_markdown", "inert_line"]

_ACTIVE = re.compile(r"([\\`<\[\]&*_~])")
_MENTION = re.compile(r"@(?=\S)")
_SCHEME = re.compile(r"(?<=\w)(?=://)")
_WWW = re.compile(r"(?i)(?<![\w.])(www)(?=\.)")
# What starts a block when it opens a line or a list item's text: a quote, a list (bullet
# or number), a thematic break, a setext underline, a table row.
_BLOCK_START = re.compile(r"^([>+\-=|])")
_NUMBERED = re.compile(r"^(\d+)([.)])")


def inert_markdown(text: str) -> str:
    """`text` as markdown that renders as the same words and does nothing else."""
    text = _MENTION.sub("@" + JOINER, text)
    text = _SCHEME.sub(JOINER, text)
    text = _WWW.sub(r"\1" + JOINER, text)
    return _ACTIVE.sub(r"\\\1", text)


def inert_line(text: str, limit: int) -> str:
    """`text` as one inert line of at most `limit` of its characters, for untrusted names
    the host lists in its own markdown (a CI check's name, conclusion or URL in "CI still
    fails: - NAME: CONCLUSION"): its line breaks become spaces, so no line of it can be a
    heading, quote or list; nothing at its start opens a block inside the host's line; a
    `#` is followed by a joiner, so it is neither a heading nor an issue reference."""
    words = inert_markdown(" ".join(text.split())[:limit]).replace("#", "#" + JOINER)
    return _NUMBERED.sub(r"\1\\\2", _BLOCK_START.sub(r"\\\1", words))
