"""The in-memory world of the GitLab-compatible testing server.

Tests seed it and inspect it from Python while the server answers python-gitlab over
real HTTP, so every write goes through one lock and every reader hands back a copy:
a test can never observe (or cause) a half-applied update.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from coding_agent.testing.git_http import Files, GitRepoStore
from coding_agent.testing.gitlab.models import (
    DEFAULT_LABEL_COLOR,
    Clock,
    Discussion,
    Group,
    Item,
    ItemKind,
    Label,
    LabelEvent,
    Note,
    Project,
    RequestRecord,
    User,
    normalise_kind,
)

__all__ = ["GitLabState"]


class GitLabState:
    """Users, groups, projects, issues, MRs, notes, discussions, labels and the request log.

    Every public method takes the lock; `lock` is public so the HTTP layer can read a
    consistent picture while it serialises a response. Methods that name an issue or MR
    take `kind="issue"` or `kind="mr"`.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.clock = Clock()
        self._ids: dict[str, Iterator[int]] = {}
        self.users: dict[int, User] = {}
        self.groups: dict[int, Group] = {}
        self.projects: dict[int, Project] = {}
        self._requests: list[RequestRecord] = []
        # Real git repositories behind `http_url_to_repo`, created on first use.
        self.git = GitRepoStore()
        self.add_user("root", name="Administrator")

    # -- identifiers -------------------------------------------------------------

    def next_id(self, sequence: str) -> int:
        with self.lock:
            counter = self._ids.setdefault(sequence, itertools.count(1))
            return next(counter)

    # -- users, groups, projects, members -------------------------------------

    def add_user(self, username: str, token: str | None = None, *, name: str | None = None, bot: bool = False) -> int:
        """Create a user; `token` (default `glpat-<username>`) authenticates API calls. Returns the id."""
        with self.lock:
            if self.find_user(username) is not None:
                raise ValueError(f"user {username!r} exists already")
            user_id = self.next_id("user")
            tokens = {token or f"glpat-{username}"}
            self.users[user_id] = User(user_id, username, name or username, tokens, self.clock.now(), bot)
            return user_id

    def add_token(self, username: str, token: str) -> None:
        with self.lock:
            self.require_user(username).tokens.add(token)

    def token_for(self, username: str) -> str:
        """One token of `username` (the first one created)."""
        with self.lock:
            return sorted(self.require_user(username).tokens)[0]

    def add_group(self, full_path: str, name: str | None = None) -> int:
        """Create a group and any missing parent groups; returns the id (existing or new)."""
        with self.lock:
            existing = self.find_group(full_path)
            if existing is not None:
                return existing.id
            parent_id = None
            if "/" in full_path:
                parent_id = self.add_group(full_path.rsplit("/", 1)[0])
            group_id = self.next_id("namespace")
            leaf = full_path.rsplit("/", 1)[-1]
            self.groups[group_id] = Group(group_id, full_path, name or leaf, parent_id, self.clock.now())
            return group_id

    def add_project(self, path_with_namespace: str, *, default_branch: str = "main", description: str = "") -> int:
        """Create a project in its group (created when missing); returns the id."""
        with self.lock:
            if "/" not in path_with_namespace:
                raise ValueError(f"project path must be 'group/project', got {path_with_namespace!r}")
            if self.find_project(path_with_namespace) is not None:
                raise ValueError(f"project {path_with_namespace!r} exists already")
            namespace_id = self.add_group(path_with_namespace.rsplit("/", 1)[0])
            project_id = self.next_id("project")
            self.projects[project_id] = Project(
                project_id, path_with_namespace, namespace_id, default_branch, description, self.clock.now()
            )
            return project_id

    def init_repo(self, project: str | int, files: Files | None = None, message: str = "Initial commit") -> str:
        """Give the project its git content: one commit of `files` on the default branch; returns the sha.

        Without this a project gets a README commit the first time it is cloned.
        """
        record = self.require_project(project)
        return self.git.init(record.path_with_namespace, files, branch=record.default_branch, message=message)

    def git_dir(self, project: str | int) -> Path:
        """The bare repository behind the project's `http_url_to_repo` (created with a README when new)."""
        record = self.require_project(project)
        return self.git.ensure(record.path_with_namespace, record.default_branch)

    def branches(self, project: str | int) -> dict[str, str]:
        """The project's git branches (name -> sha); empty before anything created its content."""
        return self.git.branches(self.require_project(project).path_with_namespace)

    def create_branch(self, project: str | int, branch: str, start: str | None = None) -> str:
        """A new git branch at `start` (default: the default branch); returns its sha."""
        record = self.require_project(project)
        self.git_dir(record.id)
        return self.git.create_branch(record.path_with_namespace, branch, start or record.default_branch)

    def set_access(self, path: str, username: str, level: int | None) -> None:
        """Make `username` a member of a project or group at `level` (None or 0 removes)."""
        with self.lock:
            user = self.require_user(username)
            project = self.find_project(path)
            members = project.members if project is not None else self.require_group(path).members
            if level:
                members[user.id] = level
            else:
                members.pop(user.id, None)

    def access_level(self, project: str | int, user_id: int) -> int | None:
        """Effective level, inherited from ancestor groups like GitLab's `members/all`."""
        with self.lock:
            record = self.require_project(project)
            levels = [record.members.get(user_id, 0)]
            group: Group | None = self.groups.get(record.namespace_id)
            while group is not None:
                levels.append(group.members.get(user_id, 0))
                group = self.groups.get(group.parent_id) if group.parent_id is not None else None
            best = max(levels)
            return best or None

    # -- lookups -----------------------------------------------------------------

    def find_user(self, username: str) -> User | None:
        with self.lock:
            return next((user for user in self.users.values() if user.username == username), None)

    def require_user(self, username: str) -> User:
        user = self.find_user(username)
        if user is None:
            raise KeyError(f"no user {username!r} in the GitLab testing server")
        return user

    def user_by_token(self, token: str) -> User | None:
        with self.lock:
            return next((user for user in self.users.values() if token in user.tokens), None)

    def find_group(self, ref: str | int) -> Group | None:
        with self.lock:
            if isinstance(ref, int) or str(ref).isdigit():
                return self.groups.get(int(ref))
            return next((group for group in self.groups.values() if group.full_path == ref), None)

    def require_group(self, ref: str | int) -> Group:
        group = self.find_group(ref)
        if group is None:
            raise KeyError(f"no group {ref!r} in the GitLab testing server")
        return group

    def find_project(self, ref: str | int) -> Project | None:
        with self.lock:
            if isinstance(ref, int) or str(ref).isdigit():
                return self.projects.get(int(ref))
            return next((p for p in self.projects.values() if p.path_with_namespace == ref), None)

    def require_project(self, ref: str | int) -> Project:
        project = self.find_project(ref)
        if project is None:
            raise KeyError(f"no project {ref!r} in the GitLab testing server")
        return project

    def projects_in_group(self, group: Group) -> list[Project]:
        """Projects of the group and of its subgroups, as GitLab's group listings include."""
        with self.lock:
            prefix = group.full_path + "/"
            return [project for project in self.projects.values() if project.path_with_namespace.startswith(prefix)]

    def require_item(self, project: str | int, iid: int, kind: str = "issue") -> Item:
        with self.lock:
            record = self.require_project(project)
            item = record.items(normalise_kind(kind)).get(iid)
            if item is None:
                raise KeyError(f"no {normalise_kind(kind)} {iid} in project {record.path_with_namespace!r}")
            return item

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

    # -- request log -------------------------------------------------------------

    def log_request(self, record: RequestRecord) -> None:
        with self.lock:
            self._requests.append(record)

    def requests(self) -> list[RequestRecord]:
        with self.lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self.lock:
            self._requests.clear()

    def count_requests(
        self, method: str | None = None, path_contains: str | None = None, *, not_modified: bool | None = None
    ) -> int:
        """How many logged requests match all the given filters."""
        with self.lock:
            return sum(
                1
                for record in self._requests
                if (method is None or record.method == method.upper())
                and (path_contains is None or path_contains in record.path)
                and (not_modified is None or record.not_modified == not_modified)
            )

    @contextmanager
    def locked(self) -> Iterator[GitLabState]:
        """Hold the lock across several reads or writes."""
        with self.lock:
            yield self


def _plural(word: str, names: list[str]) -> str:
    return word + ("s" if len(names) > 1 else "")


def _discussion_id(origin: str, seed: int) -> str:
    """GitLab discussion ids are 40 hex characters."""
    return hashlib.sha1(f"{origin}-{seed}".encode()).hexdigest()
