"""The `q` language of GET /search/issues, as far as the agent and its tests use it.

Supported: `is:open|closed|issue|pr`, `state:`, `type:`, `label:x` / `label:"a b"` (several
are AND-ed; `label:a,b` is OR), `-label:x`, `no:label`, `no:assignee`, `assignee:x`,
`author:x`, `repo:o/r`, `user:x`, `org:x` (scope qualifiers are OR-ed with each other, like
GitHub), `mentions:x` (an @x in the body, a comment or a PR's review comment),
`updated:>=T` / `updated:>T`, and free words matched in title and body. Other qualifiers
(`archived:false`, `sort:`...) are accepted and ignored, as GitHub ignores what does not apply.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from coding_agent.sandbox.github.records import IssueRecord

__all__ = ["SearchQuery", "parse_query", "MAX_QUERY_LENGTH"]

# GitHub answers 422 to a longer `q` ("The search is longer than 256 characters.").
MAX_QUERY_LENGTH = 256

_TOKEN = re.compile(r'(?P<neg>-?)(?P<key>[A-Za-z_-]+):(?P<value>"[^"]*"|\S+)|(?P<word>"[^"]*"|\S+)')


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


@dataclass
class SearchQuery:
    state: str | None = None
    kind: str | None = None
    labels: list[list[str]] = field(default_factory=list)
    excluded_labels: list[str] = field(default_factory=list)
    no_label: bool = False
    no_assignee: bool = False
    assignees: list[str] = field(default_factory=list)
    authors: list[str] = field(default_factory=list)
    repos: list[str] = field(default_factory=list)
    owners: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    mentions: list[str] = field(default_factory=list)
    updated_after: datetime | None = None
    updated_inclusive: bool = True

    def matches(
        self, issue: IssueRecord, owner: str, comment_bodies: Callable[[], Iterable[str]] = lambda: ()
    ) -> bool:
        """Whether `issue` (in a repository owned by `owner`) is a hit; `comment_bodies` for `mentions:`."""
        if self.updated_after is not None:
            if issue.updated_at < self.updated_after:
                return False
            if issue.updated_at == self.updated_after and not self.updated_inclusive:
                return False
        if self.mentions:
            texts = [issue.body, *comment_bodies()]
            for login in self.mentions:
                pattern = re.compile(rf"(?<![\w@])@{re.escape(login)}(?![\w-])", re.IGNORECASE)
                if not any(pattern.search(text or "") for text in texts):
                    return False
        if self.state is not None and issue.state != self.state:
            return False
        if self.kind is not None and issue.is_pull != (self.kind == "pr"):
            return False
        have = {label.lower() for label in issue.labels}
        if any(not have.intersection(choice) for choice in self.labels):
            return False
        if have.intersection(self.excluded_labels) or (self.no_label and have):
            return False
        assigned = {login.lower() for login in issue.assignees}
        if (self.no_assignee and assigned) or any(login not in assigned for login in self.assignees):
            return False
        if self.authors and issue.author.lower() not in self.authors:
            return False
        if (self.repos or self.owners) and not (
            issue.repo.lower() in self.repos or owner.lower() in self.owners
        ):
            return False
        text = f"{issue.title}\n{issue.body}".lower()
        return all(word in text for word in self.words)


def parse_query(q: str) -> SearchQuery:
    query = SearchQuery()
    for match in _TOKEN.finditer(q):
        if match["word"] is not None:
            word = _unquote(match["word"]).lower()
            if word not in ("and", ""):
                query.words.append(word)
            continue
        key, value, negated = match["key"].lower(), _unquote(match["value"]), bool(match["neg"])
        lowered = value.lower()
        if key == "label":
            if negated:
                query.excluded_labels.append(lowered)
            else:
                query.labels.append([part.strip() for part in lowered.split(",")])
        elif key in ("is", "state", "type"):
            if lowered in ("open", "closed"):
                query.state = lowered
            elif lowered in ("issue", "pr"):
                query.kind = lowered
        elif key == "no" and lowered in ("label", "assignee"):
            setattr(query, f"no_{lowered}", True)
        elif key == "assignee":
            query.assignees.append(lowered)
        elif key == "author":
            query.authors.append(lowered)
        elif key == "repo":
            query.repos.append(lowered)
        elif key in ("user", "org"):
            query.owners.append(lowered)
        elif key == "mentions":
            query.mentions.append(lowered)
        elif key == "updated" and value.startswith(">"):
            query.updated_inclusive = value.startswith(">=")
            stamp = value.lstrip(">=")
            moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            query.updated_after = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return query
