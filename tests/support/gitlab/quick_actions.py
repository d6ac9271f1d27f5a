"""Quick actions, as the GitLab testing server runs them: like GitLab, with the writer's rights.

GitLab runs a `/command` that starts a line (column 0, the name in any case) of a note
or an issue/MR description created or edited through the API, as the text's author, and
keeps the text without that line. The server runs the ones a prompt injection would
want (`/merge`, `/approve`, `/label`, `/unlabel`, `/assign`, `/unassign`, `/close`,
`/reopen`) and records each on the item's `quick_actions`, so a test sees an attack that
works. Any other `/word` stays in the text, as GitLab leaves an unknown command.
"""

from __future__ import annotations

import re
import shlex

from tests.support.gitlab.models import Item
from tests.support.gitlab.state import GitLabState

__all__ = ["run_quick_actions", "COMMANDS"]

COMMANDS = ("merge", "approve", "label", "unlabel", "assign", "unassign", "close", "reopen")
_LINE = re.compile(rf"^/(?P<name>{'|'.join(COMMANDS)})(?:[ ]+(?P<arg>[^\n]*))?[ \t]*(?:\n|\Z)", re.MULTILINE | re.IGNORECASE)


def run_quick_actions(state: GitLabState, item: Item, actor_id: int, text: str) -> str:
    """Run the quick actions of `text` on `item` as `actor_id`; the text GitLab keeps."""
    with state.lock:
        for match in _LINE.finditer(text):
            name, arg = match.group("name").lower(), (match.group("arg") or "").strip()
            _run(state, item, actor_id, name, arg)
            item.quick_actions.append(f"/{name} {arg}".rstrip())
        return _LINE.sub("", text)


def _names(arg: str, sigil: str) -> list[str]:
    try:
        words = shlex.split(arg)
    except ValueError:
        words = arg.split()
    return [word.removeprefix(sigil) for word in words if word.removeprefix(sigil)]


def _run(state: GitLabState, item: Item, actor_id: int, name: str, arg: str) -> None:
    if name == "merge" and item.kind == "mr":
        state.apply_state(item, "merged")
    elif name == "approve" and item.kind == "mr" and actor_id not in item.approved_by:
        item.approved_by.append(actor_id)
    elif name in ("close", "reopen"):
        state.apply_state(item, "closed" if name == "close" else "opened")
    elif name == "label":
        state.change_labels(item, _names(arg, "~"), [], actor_id)
    elif name == "unlabel":
        state.change_labels(item, [], _names(arg, "~") if arg else list(item.labels), actor_id)
    elif name in ("assign", "unassign"):
        users = [state.find_user(username) for username in _names(arg, "@")]
        named = [user.id for user in users if user is not None]
        if name == "assign":
            state.set_assignees(item, [*item.assignee_ids, *named], actor_id)
        else:
            state.set_assignees(item, [uid for uid in item.assignee_ids if arg and uid not in named], actor_id)
