"""Webhook deliveries shaped like GitHub's (the documented `issues` and `issue_comment`
payloads), built from the sandbox's own records, signed like GitHub signs them."""

from __future__ import annotations

import json
import uuid
from typing import Any

from coding_agent.sandbox.github.render import Renderer
from coding_agent.sandbox.github.state import GitHubState

__all__ = ["GitHubWebhooks"]

_REACTIONS = {
    "url": "",
    "total_count": 0,
    "+1": 0,
    "-1": 0,
    "laugh": 0,
    "confused": 0,
    "heart": 0,
    "hooray": 0,
    "eyes": 0,
    "rocket": 0,
}


class GitHubWebhooks:
    def __init__(self, state: GitHubState, base_url: str = "http://127.0.0.1") -> None:
        self._render = Renderer(state, f"{base_url}/api/v3", base_url)
        self._state = state

    def _issue(self, repo: str, number: int) -> dict[str, Any]:
        issue = self._render.issue(self._state.issue(repo, number))
        issue.setdefault("reactions", {**_REACTIONS, "url": f"{issue['url']}/reactions"})
        return issue

    def _common(self, repo: str, sender: str) -> dict[str, Any]:
        return {"repository": self._render.repo(self._state.repo(repo)), "sender": self._render.login(sender)}

    def issues(self, repo: str, number: int, action: str, sender: str, label: str | None = None) -> dict[str, Any]:
        payload: dict[str, Any] = {"action": action, "issue": self._issue(repo, number), **self._common(repo, sender)}
        if label is not None:
            payload["label"] = self._render.label(repo, self._state.label(repo, label))
        if action in ("assigned", "unassigned"):
            issue = payload["issue"]
            payload["assignee"] = issue["assignees"][0] if issue["assignees"] else self._render.login(sender)
        return payload

    def issue_comment(self, repo: str, number: int, comment_id: int, sender: str) -> dict[str, Any]:
        comment = self._render.comment(self._state.comment(comment_id))
        comment.setdefault("reactions", {**_REACTIONS, "url": f"{comment['url']}/reactions"})
        return {"action": "created", "issue": self._issue(repo, number), "comment": comment, **self._common(repo, sender)}

    @staticmethod
    def headers(event: str, body: bytes, secret: str, delivery: str | None = None) -> dict[str, str]:
        from githubkit.webhooks import sign

        return {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(secret, body, "sha256"),
            "Content-Type": "application/json",
        }

    @staticmethod
    def body(payload: dict[str, Any]) -> bytes:
        return json.dumps(payload).encode()
