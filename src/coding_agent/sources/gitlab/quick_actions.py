"""No text the agent writes to GitLab runs a quick action (SPEC 15).

GitLab runs the quick actions (`/merge`, `/approve`, `/label ~x`, `/assign @eve`, ...)
it finds at the start of a line of a note, an issue or MR description, created or
edited, with its author's rights: the bot's. The model's words reach those texts, so a
prompt injection could merge or approve through them. Every text `GitLabSource` writes
goes through `neutralise_quick_actions`: a zero-width joiner after the slash of every
`/word` that starts a line. GitLab then sees no command; readers see the same words.

The rule is wider than GitLab's own parser on purpose: any word (GitLab adds commands
over time), also after leading blanks or blockquote `>` marks, also inside code blocks
(which GitLab skips, but only the fences its version recognises), and any line break.

`restore_quick_actions` takes the joiners out again when GitLab's answers are read, so
nothing above the adapter sees them: a final comment read back compares equal to the
text that was posted, and a description rewritten from its read-back is neutralised once.
"""

from __future__ import annotations

import re

from coding_agent.domain.inert import JOINER

__all__ = ["neutralise_quick_actions", "restore_quick_actions"]

_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
# A line's start, its blanks and blockquote marks, and the slash.
_LINE_SLASH = rf"(?:\A|(?<=[{_BREAKS}]))((?:[^\S{_BREAKS}]|>)*/)"
_COMMAND = re.compile(_LINE_SLASH + r"(?=\w)")
_NEUTRALISED = re.compile(_LINE_SLASH + JOINER + r"(?=\w)")


def neutralise_quick_actions(text: str) -> str:
    """`text` with no line starting with a quick action; idempotent."""
    return _COMMAND.sub(lambda match: match.group(1) + JOINER, text) if "/" in text else text


def restore_quick_actions(text: str) -> str:
    """`text` as it was before `neutralise_quick_actions`."""
    return _NEUTRALISED.sub(lambda match: match.group(1), text) if JOINER in text else text
