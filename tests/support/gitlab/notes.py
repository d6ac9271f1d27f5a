"""Notes and discussions on issues and merge requests, in the GitLab testing server.

A note is a comment; a discussion is a thread of notes (an individual note is a
discussion of one). System notes ("added ~label", "assigned to @x") are written here
for the other parts.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from tests.support.gitlab.models import Discussion, Item, Note
from tests.support.gitlab.tables import GitLabTables

__all__ = ["Notes"]


class Notes(GitLabTables):
    """What people (and the system) wrote on issues and MRs."""

    # -- notes and discussions -------------------------------------------------

    def _append_note(
        self,
        item: Item,
        author_id: int,
        body: str,
        *,
        system: bool = False,
        discussion: Discussion | None = None,
        note_type: str | None = None,
        position: dict[str, Any] | None = None,
    ) -> Note:
        now = self.clock.now()
        note_id = self.next_id("note")
        if discussion is None:
            discussion = Discussion(_discussion_id("note", note_id), individual_note=True)
            item.discussions[discussion.id] = discussion
        note = Note(
            note_id,
            author_id,
            body,
            system,
            now,
            now,
            item.kind,
            item.id,
            item.iid,
            item.project_id,
            discussion.id,
            note_type,
            copy.deepcopy(position),
        )
        item.notes[note_id] = note
        discussion.note_ids.append(note_id)
        item.updated_at = now
        return note

    def post_note(self, item: Item, author_id: int, body: str) -> Note:
        """A top-level (individual) note, as POST .../notes creates."""
        with self.lock:
            return self._append_note(item, author_id, body)

    def start_discussion(
        self, item: Item, author_id: int, body: str, position: dict[str, Any] | None = None
    ) -> Discussion:
        """A thread, as POST .../discussions creates: a `DiffNote` when it has a position."""
        with self.lock:
            discussion = Discussion(_discussion_id("thread", self.next_id("discussion")), individual_note=False)
            item.discussions[discussion.id] = discussion
            note_type = "DiffNote" if position else "DiscussionNote"
            self._append_note(item, author_id, body, discussion=discussion, note_type=note_type, position=position)
            return discussion

    def reply(self, item: Item, discussion: Discussion, author_id: int, body: str) -> Note:
        """A note in an existing discussion; replying to an individual note turns it into a thread."""
        with self.lock:
            first = item.notes[discussion.note_ids[0]]
            if discussion.individual_note:
                discussion.individual_note = False
                first.type = "DiscussionNote"
            note_type = "DiffNote" if first.position else "DiscussionNote"
            return self._append_note(
                item, author_id, body, discussion=discussion, note_type=note_type, position=first.position
            )

    def edit_note(self, note: Note, body: str) -> None:
        with self.lock:
            note.body = body
            note.updated_at = self.clock.now()

    def add_note(
        self, project: str | int, iid: int, author: str, body: str, kind: str = "issue", *, system: bool = False
    ) -> int:
        """Post a note (a system note with `system=True`); returns its id."""
        with self.lock:
            item = self.require_item(project, iid, kind)
            return self._append_note(item, self.require_user(author).id, body, system=system).id

    def update_note(self, project: str | int, iid: int, note_id: int, body: str, kind: str = "issue") -> None:
        with self.lock:
            item = self.require_item(project, iid, kind)
            if note_id not in item.notes:
                raise KeyError(f"no note {note_id} on {kind} {iid}")
            self.edit_note(item.notes[note_id], body)

    def add_discussion(
        self,
        project: str | int,
        iid: int,
        author: str,
        body: str,
        position: dict[str, Any] | None = None,
        kind: str = "mr",
    ) -> str:
        """Start a discussion thread (on an MR by default); returns the discussion id."""
        with self.lock:
            item = self.require_item(project, iid, kind)
            return self.start_discussion(item, self.require_user(author).id, body, position).id

    def reply_to_discussion(
        self, project: str | int, iid: int, discussion_id: str, author: str, body: str, kind: str = "mr"
    ) -> int:
        """Reply in a discussion; returns the new note's id."""
        with self.lock:
            item = self.require_item(project, iid, kind)
            discussion = item.discussions.get(discussion_id)
            if discussion is None:
                raise KeyError(f"no discussion {discussion_id!r} on {kind} {iid}")
            return self.reply(item, discussion, self.require_user(author).id, body).id


def _discussion_id(origin: str, seed: int) -> str:
    """GitLab discussion ids are 40 hex characters."""
    return hashlib.sha1(f"{origin}-{seed}".encode()).hexdigest()
