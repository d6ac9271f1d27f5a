"""The GitHub testing server's endpoints of issues: the issues, their comments, labels,
assignees and events."""

from __future__ import annotations

from datetime import datetime

from starlette.requests import Request
from starlette.responses import Response

from coding_agent.sandbox.github.endpoints import Endpoints, read_body, required_string, string_list, within_limit
from coding_agent.sandbox.github.http import ApiError, json_reply, paginate
from coding_agent.sandbox.github.records import RepoRecord
from coding_agent.sandbox.github.state import NotFoundError

__all__ = ["IssueEndpoints"]


class IssueEndpoints(Endpoints):
    """Issues, comments, labels, assignees, events."""

    # ------------------------------------------------------------ issues

    async def get_issue(self, request: Request) -> Response:
        repo = self._repo(request)
        return json_reply(request, self._render(request).issue(self._issue(request, repo)))

    async def create_issue(self, request: Request) -> Response:
        repo = self._repo(request)
        body = await read_body(request)
        title = required_string(body, "title")
        login = request.state.login
        # GitHub silently drops labels and assignees from users who may not triage.
        may_triage = self.state.can(repo.full_name, login, "triage")
        labels = string_list(body.get("labels"), "labels") if may_triage else []
        assignees = string_list(body.get("assignees"), "assignees") if may_triage else []
        number = self.state.create_issue(
            repo.full_name, title, within_limit(body.get("body") or "", "Issue"), login, labels, assignees
        )
        issue = self.state.issue(repo.full_name, number)
        return json_reply(request, self._render(request).issue(issue), status=201)

    async def update_issue(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = await self._edit(request, repo, self._issue(request, repo), "triage", "Issue")
        return json_reply(request, self._render(request).issue(issue))


    # ------------------------------------------------------------ comments

    async def list_comments(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        comments = self.state.comments(repo.full_name, issue.number)
        since = request.query_params.get("since")
        if since:
            try:
                threshold = datetime.fromisoformat(since.replace("Z", "+00:00"))
            except ValueError:
                raise ApiError(422, f"Invalid value for since: {since!r}") from None
            comments = [c for c in comments if c.updated_at >= threshold]
        page, link = paginate(request, comments)
        render = self._render(request)
        return json_reply(request, [render.comment(c) for c in page], link=link)

    async def create_comment(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        text = within_limit(required_string(await read_body(request), "body"), "IssueComment")
        comment_id = self.state.add_comment(repo.full_name, issue.number, request.state.login, text)
        return json_reply(request, self._render(request).comment(self.state.comment(comment_id)), status=201)

    def _own_comment(self, request: Request, repo: RepoRecord) -> int:
        comment_id: int = request.path_params["comment_id"]
        comment = self.state.comment(comment_id)
        if comment.repo.lower() != repo.full_name.lower():
            raise NotFoundError(str(comment_id))
        return comment_id

    async def get_comment(self, request: Request) -> Response:
        repo = self._repo(request)
        comment = self.state.comment(self._own_comment(request, repo))
        return json_reply(request, self._render(request).comment(comment))

    async def update_comment(self, request: Request) -> Response:
        repo = self._repo(request)
        comment_id = self._own_comment(request, repo)
        if self.state.comment(comment_id).author.lower() != request.state.login.lower():
            self._require(request, repo, "write")
        text = within_limit(required_string(await read_body(request), "body"), "IssueComment")
        return json_reply(request, self._render(request).comment(self.state.edit_comment(comment_id, text)))

    # ------------------------------------------------------------ labels

    async def list_repo_labels(self, request: Request) -> Response:
        repo = self._repo(request)
        page, link = paginate(request, self.state.labels(repo.full_name))
        render = self._render(request)
        return json_reply(request, [render.label(repo.full_name, label) for label in page], link=link)

    async def get_repo_label(self, request: Request) -> Response:
        repo = self._repo(request)
        label = self.state.label(repo.full_name, request.path_params["name"])
        return json_reply(request, self._render(request).label(repo.full_name, label))

    async def create_repo_label(self, request: Request) -> Response:
        repo = self._repo(request)
        self._require(request, repo, "write")
        body = await read_body(request)
        name = required_string(body, "name")
        label = self.state.create_label(repo.full_name, name, body.get("color") or "ededed", body.get("description"))
        return json_reply(request, self._render(request).label(repo.full_name, label), status=201)

    async def list_issue_labels(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        return json_reply(request, self._render(request).issue_labels(issue))

    async def add_issue_labels(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        self._require(request, repo, "triage")
        body = await read_body(request)
        names = string_list(body.get("labels") if isinstance(body, dict) else body, "labels")
        for name in names:
            self.state.add_label(repo.full_name, issue.number, name, request.state.login)
        issue = self.state.issue(repo.full_name, issue.number)
        return json_reply(request, self._render(request).issue_labels(issue))

    async def remove_issue_label(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        self._require(request, repo, "triage")
        if not self.state.remove_label(repo.full_name, issue.number, request.path_params["name"], request.state.login):
            raise ApiError(404, "Label does not exist")
        issue = self.state.issue(repo.full_name, issue.number)
        return json_reply(request, self._render(request).issue_labels(issue))

    # ------------------------------------------------------------ assignees and events

    async def add_assignees(self, request: Request) -> Response:
        return await self._change_assignees(request, add=True)

    async def remove_assignees(self, request: Request) -> Response:
        return await self._change_assignees(request, add=False)

    async def _change_assignees(self, request: Request, add: bool) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        self._require(request, repo, "triage")
        body = await read_body(request)
        change = self.state.assign if add else self.state.unassign
        for login in string_list(body.get("assignees"), "assignees"):
            change(repo.full_name, issue.number, login, request.state.login)
        issue = self.state.issue(repo.full_name, issue.number)
        return json_reply(request, self._render(request).issue(issue), status=201 if add else 200)

    async def list_events(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        page, link = paginate(request, self.state.events(repo.full_name, issue.number))
        render = self._render(request)
        return json_reply(request, [render.event(event) for event in page], link=link)
