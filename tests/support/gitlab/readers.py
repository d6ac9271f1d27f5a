"""Readers of the GitLab testing server's world for tests: copies, safe to keep."""

from __future__ import annotations

import copy

from tests.support.gitlab.models import Discussion, Item, LabelEvent, Note
from tests.support.gitlab.tables import GitLabTables

__all__ = ["Readers"]


class Readers(GitLabTables):
    """An issue, MR, its notes, discussions, labels and label events, as deep copies."""

    # -- readers (copies, safe to keep) -------------------------------------------

    def issue(self, project: str | int, iid: int) -> Item:
        with self.lock:
            return copy.deepcopy(self.require_item(project, iid, "issue"))

    def merge_request(self, project: str | int, iid: int) -> Item:
        with self.lock:
            return copy.deepcopy(self.require_item(project, iid, "mr"))

    def labels_of(self, project: str | int, iid: int, kind: str = "issue") -> list[str]:
        with self.lock:
            return list(self.require_item(project, iid, kind).labels)

    def assignees_of(self, project: str | int, iid: int, kind: str = "issue") -> list[str]:
        with self.lock:
            return [self.users[uid].username for uid in self.require_item(project, iid, kind).assignee_ids]

    def notes(self, project: str | int, iid: int, kind: str = "issue", *, system: bool | None = None) -> list[Note]:
        """Notes oldest first; `system=False` leaves system notes out, `True` keeps only them."""
        with self.lock:
            notes = self.require_item(project, iid, kind).notes.values()
            return [copy.deepcopy(n) for n in notes if system is None or n.system == system]

    def discussions(self, project: str | int, iid: int, kind: str = "mr") -> list[Discussion]:
        with self.lock:
            return copy.deepcopy(list(self.require_item(project, iid, kind).discussions.values()))

    def label_events(self, project: str | int, iid: int, kind: str = "issue") -> list[LabelEvent]:
        with self.lock:
            return copy.deepcopy(self.require_item(project, iid, kind).label_events)

    def project_labels(self, project: str | int) -> list[str]:
        with self.lock:
            return list(self.require_project(project).labels)
