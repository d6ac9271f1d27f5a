"""Issues and merge requests, their labels and assignees, in the GitLab testing server.

Methods that name an issue or MR take `kind="issue"` or `kind="mr"`. A label or
assignee change records what GitLab records: label events and a system note.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.support.gitlab.accounts import Accounts
from tests.support.gitlab.models import (
    DEFAULT_LABEL_COLOR,
    Item,
    ItemKind,
    Label,
    LabelEvent,
    Project,
)
from tests.support.gitlab.notes import Notes

__all__ = ["Issues"]


class Issues(Accounts, Notes):
    """Issues and MRs of the projects, with their labels, assignees and state."""

    # -- labels --------------------------------------------------------------------

    def create_label(
        self, project: str | int, name: str, color: str = DEFAULT_LABEL_COLOR, description: str = ""
    ) -> Label:
        """Create a project label; a label of that name is an error, as in GitLab (409)."""
        with self.lock:
            record = self.require_project(project)
            if name in record.labels:
                raise ValueError(f"label {name!r} exists already in {record.path_with_namespace!r}")
            label = Label(self.next_id("label"), name, color, description)
            record.labels[name] = label
            return label

    def ensure_label(self, project: Project, name: str) -> Label:
        """GitLab creates a missing project label when an issue update applies it."""
        with self.lock:
            return project.labels.get(name) or self.create_label(project.id, name)

    def change_labels(
        self, item: Item, add: Iterable[str], remove: Iterable[str], actor_id: int, *, system_note: bool = True
    ) -> None:
        """Apply label additions and removals, recording label events and a system note."""
        with self.lock:
            project = self.projects[item.project_id]
            added = [name for name in dict.fromkeys(add) if name and name not in item.labels]
            removed = [name for name in dict.fromkeys(remove) if name in item.labels and name not in added]
            if not added and not removed:
                return
            now = self.clock.now()
            for name in added:
                label = self.ensure_label(project, name)
                item.labels.append(name)
                item.label_events.append(LabelEvent(self.next_id("label_event"), actor_id, label.id, name, "add", now))
            for name in removed:
                label = self.ensure_label(project, name)
                item.labels.remove(name)
                item.label_events.append(
                    LabelEvent(self.next_id("label_event"), actor_id, label.id, name, "remove", now)
                )
            item.updated_at = now
            if system_note:
                parts = []
                if added:
                    parts.append("added " + " ".join(f'~"{name}"' for name in added) + _plural(" label", added))
                if removed:
                    parts.append("removed " + " ".join(f'~"{name}"' for name in removed) + _plural(" label", removed))
                self._append_note(item, actor_id, " and ".join(parts), system=True)

    def set_labels(self, item: Item, labels: Iterable[str], actor_id: int) -> None:
        with self.lock:
            wanted = list(dict.fromkeys(name for name in labels if name))
            self.change_labels(item, wanted, [name for name in item.labels if name not in wanted], actor_id)

    def add_label(self, project: str | int, iid: int, name: str, actor: str, kind: str = "issue") -> None:
        """Add one label as `actor` did it in the UI: label event, system note, label created if new."""
        with self.lock:
            item = self.require_item(project, iid, kind)
            self.change_labels(item, [name], [], self.require_user(actor).id)

    def remove_label(self, project: str | int, iid: int, name: str, actor: str, kind: str = "issue") -> None:
        with self.lock:
            item = self.require_item(project, iid, kind)
            self.change_labels(item, [], [name], self.require_user(actor).id)

    # -- assignees -----------------------------------------------------------------

    def set_assignees(self, item: Item, user_ids: Iterable[int], actor_id: int) -> None:
        """Replace the assignees, with GitLab's "assigned to / unassigned" system note."""
        with self.lock:
            wanted = list(dict.fromkeys(user_ids))
            added = [uid for uid in wanted if uid not in item.assignee_ids]
            removed = [uid for uid in item.assignee_ids if uid not in wanted]
            if not added and not removed:
                return
            item.assignee_ids = wanted
            item.updated_at = self.clock.now()
            parts = []
            if added:
                parts.append("assigned to " + " and ".join(f"@{self.users[uid].username}" for uid in added))
            if removed:
                parts.append("unassigned " + " and ".join(f"@{self.users[uid].username}" for uid in removed))
            self._append_note(item, actor_id, " and ".join(parts), system=True)

    def assign(self, project: str | int, iid: int, username: str, actor: str = "root", kind: str = "issue") -> None:
        with self.lock:
            item = self.require_item(project, iid, kind)
            user = self.require_user(username)
            self.set_assignees(item, [*item.assignee_ids, user.id], self.require_user(actor).id)

    def unassign(self, project: str | int, iid: int, username: str, actor: str = "root", kind: str = "issue") -> None:
        with self.lock:
            item = self.require_item(project, iid, kind)
            user = self.require_user(username)
            remaining = [uid for uid in item.assignee_ids if uid != user.id]
            self.set_assignees(item, remaining, self.require_user(actor).id)

    # -- issues and merge requests ---------------------------------------------

    def _new_item(
        self,
        kind: ItemKind,
        project: str | int,
        title: str,
        description: str,
        author: str,
        labels: Iterable[str],
        assignees: Iterable[str],
        **extra: Any,
    ) -> Item:
        record = self.require_project(project)
        author_id = self.require_user(author).id
        assignee_ids = [self.require_user(name).id for name in assignees]
        iid = self.next_id(f"{kind}-iid-{record.id}")
        now = self.clock.now()
        item = Item(
            kind,
            self.next_id(kind),
            iid,
            record.id,
            title,
            description,
            author_id,
            now,
            now,
            assignee_ids=assignee_ids,
            **extra,
        )
        record.items(kind)[iid] = item
        # GitLab records label events (but no system note) for the labels an item is created with.
        self.change_labels(item, labels, [], author_id, system_note=False)
        item.updated_at = now
        return item

    def create_issue(
        self,
        project: str | int,
        title: str,
        description: str = "",
        author: str = "root",
        labels: Iterable[str] = (),
        assignees: Iterable[str] = (),
    ) -> int:
        """Open an issue; returns its iid."""
        with self.lock:
            return self._new_item("issue", project, title, description, author, labels, assignees).iid

    def create_merge_request(
        self,
        project: str | int,
        title: str,
        description: str = "",
        author: str = "root",
        source_branch: str = "feature",
        target_branch: str | None = None,
        labels: Iterable[str] = (),
        assignees: Iterable[str] = (),
    ) -> int:
        """Open a merge request (a `Draft:` title makes it a draft); returns its iid.

        A `source_branch` missing from git is created from the target branch, so that
        the agent can clone it (the HTTP endpoint refuses a missing branch instead).
        """
        with self.lock:
            record = self.require_project(project)
            self.git_dir(record.id)
            branches = self.git.branches(record.path_with_namespace)
            if source_branch not in branches:
                start = target_branch if target_branch in branches else record.default_branch
                self.git.create_branch(record.path_with_namespace, source_branch, start)
            item = self._new_item(
                "mr",
                project,
                title,
                description,
                author,
                labels,
                assignees,
                source_branch=source_branch,
                target_branch=target_branch or record.default_branch,
            )
            return item.iid

    def set_state(self, project: str | int, iid: int, state: str, kind: str = "issue") -> None:
        """Move an item to `opened`, `closed` or (MRs) `merged`."""
        with self.lock:
            item = self.require_item(project, iid, kind)
            self.apply_state(item, state)

    def apply_state(self, item: Item, state: str) -> None:
        with self.lock:
            allowed = ("opened", "closed", "merged") if item.kind == "mr" else ("opened", "closed")
            if state not in allowed:
                raise ValueError(f"state {state!r} is not one of {', '.join(allowed)}")
            now = self.clock.now()
            item.state = state
            item.closed_at = now if state == "closed" else None
            item.merged_at = now if state == "merged" else item.merged_at
            item.updated_at = now


def _plural(word: str, names: list[str]) -> str:
    return word + ("s" if len(names) > 1 else "")
