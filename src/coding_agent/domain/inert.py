"""The one character the host writes into untrusted text to keep a forge from acting on it.

A zero-width joiner is invisible, and it is neither a word, name nor URL character: put
after `@` it ends a mention, before `://` an autolink, after a line's `/` a GitLab
quick action, while readers see the same words. The agent's markdown (`agent/markdown.py`)
and the GitLab adapter (`sources/gitlab/quick_actions.py`) both write it; both stand
above this floor, so this is where the one definition lives.
"""

from __future__ import annotations

__all__ = ["JOINER"]

JOINER = "\u200d"  # ZERO WIDTH JOINER
