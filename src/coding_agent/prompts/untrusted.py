"""The one wrapper for untrusted text (SPEC 3, SPEC 15 "change what the agent trusts").

Text written by someone without write access (their comments, the title and body of
their issue or PR, the rules files on a PR branch they control) reaches the model inside
a block it is told to treat as data. The block must be impossible to close from inside:

- the tag carries a random nonce chosen per run (`<untrusted-content-<nonce> ...>`), which
  the text's author cannot know when writing it, and the system prompt names it;
- anything in the text that looks like the start of such a tag, in any letter case, with
  spaces, newlines, underscores, zero-width or full-width characters, with or without a
  nonce or attributes, opening or closing, loses its `<`, so the model never reads a
  second tag inside the block.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace

from coding_agent.domain.tasks import Comment

__all__ = ["UntrustedWrapper", "neutralise_tags", "TAG_NAME"]

TAG_NAME = "untrusted-content"
# Between `<`, `/`, "untrusted" and "content": any run of non-word characters (spaces,
# newlines, dashes, underscores, zero-width and full-width marks), but never another `<`
# or `>`, so that every `<` of a nested look-alike is found on its own.
_GAP = r"(?:[^\w<>\uff1c\uff1e]|_)*"
_LOOK_ALIKE = re.compile(
    r"[<\uff1c\ufe64\u2039\u3008]" + rf"({_GAP}untrusted{_GAP}content)",
    re.IGNORECASE,
)
_AUTHOR_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-\[\]]")


def neutralise_tags(text: str) -> str:
    """`text` with every look-alike of the wrapper's tags made inert (`<` -> `&lt;`)."""
    return _LOOK_ALIKE.sub(r"&lt;\1", text)


@dataclass(frozen=True)
class UntrustedWrapper:
    """Wraps untrusted text for one run; `new()` draws the run's nonce."""

    nonce: str

    @classmethod
    def new(cls) -> UntrustedWrapper:
        return cls(secrets.token_hex(8))

    @property
    def tag(self) -> str:
        """The tag name of this run's blocks, as the system prompt names it."""
        return f"{TAG_NAME}-{self.nonce}"

    @property
    def closing_tag(self) -> str:
        return f"</{self.tag}>"

    def wrap(self, author: str, text: str) -> str:
        """`text` by `author` as a block the model reads as data, never as instructions."""
        name = _AUTHOR_UNSAFE.sub("_", author)[:100]
        return f'<{self.tag} author="{name}">\n{neutralise_tags(text)}\n{self.closing_tag}'

    def comment(self, comment: Comment, is_trusted: Callable[[str], bool]) -> Comment:
        """The comment with its text wrapped as untrusted when its author lacks write access."""
        if is_trusted(comment.author):
            return comment
        return replace(comment, body=self.wrap(comment.author, comment.body.strip() or "(empty)"))
