"""The GitHub testing server's endpoints of pull requests and their review comments."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from coding_agent.sandbox.github.endpoints import Endpoints, read_body, required_string, within_limit
from coding_agent.sandbox.github.http import json_reply, paginate
from coding_agent.sandbox.github.state import ValidationFailed

__all__ = ["PullEndpoints"]


class PullEndpoints(Endpoints):
    """Pull requests, and replies in their review threads."""

    # ------------------------------------------------------------ pull requests

    async def get_pull(self, request: Request) -> Response:
        repo = self._repo(request)
        return json_reply(request, self._render(request).pull(self._pull(request, repo)))

    async def list_pulls(self, request: Request) -> Response:
        repo = self._repo(request)
        params = request.query_params
        wanted_state = params.get("state", "open")
        head = params.get("head")
        pulls = self.state.pulls(repo.full_name)
        if wanted_state != "all":
            pulls = [p for p in pulls if p.state == wanted_state]
        if head:
            owner, _, branch = head.rpartition(":")
            pulls = [
                p
                for p in pulls
                if p.head == branch and (not owner or (p.head_owner or repo.owner).lower() == owner.lower())
            ]
        if params.get("base"):
            pulls = [p for p in pulls if p.base == params["base"]]
        pulls.sort(key=lambda p: p.number, reverse=params.get("direction", "desc") != "asc")
        page, link = paginate(request, pulls)
        render = self._render(request)
        return json_reply(request, [render.pull(p) for p in page], link=link)

    async def create_pull(self, request: Request) -> Response:
        repo = self._repo(request)
        self._require(request, repo, "write")
        body = await read_body(request)
        title = required_string(body, "title")
        owner, _, head = required_string(body, "head").rpartition(":")
        base = required_string(body, "base")
        if not owner or owner.lower() == repo.owner.lower():
            branches = self.state.branches(repo.full_name)
            for field, branch in (("head", head), ("base", base)):
                if branch not in branches:
                    raise ValidationFailed(f"{field} branch {branch!r} does not exist", "PullRequest", "invalid", field)
        number = self.state.create_pull(
            repo.full_name,
            title,
            within_limit(body.get("body") or "", "PullRequest"),
            request.state.login,
            head=head,
            base=base,
            draft=bool(body.get("draft", False)),
            head_owner=owner or None,
        )
        return json_reply(request, self._render(request).pull(self.state.issue(repo.full_name, number)), status=201)

    async def update_pull(self, request: Request) -> Response:
        repo = self._repo(request)
        pull = await self._edit(request, repo, self._pull(request, repo), "write", "PullRequest")
        return json_reply(request, self._render(request).pull(pull))

    async def list_review_comments(self, request: Request) -> Response:
        repo = self._repo(request)
        pull = self._pull(request, repo)
        page, link = paginate(request, self.state.review_comments(repo.full_name, pull.number))
        render = self._render(request)
        return json_reply(request, [render.review_comment(c) for c in page], link=link)

    async def reply_review_comment(self, request: Request) -> Response:
        repo = self._repo(request)
        pull = self._pull(request, repo)
        text = within_limit(required_string(await read_body(request), "body"), "IssueComment")
        comment_id = self.state.add_review_comment(
            repo.full_name, pull.number, request.state.login, text, in_reply_to=request.path_params["comment_id"]
        )
        return json_reply(request, self._render(request).review_comment(self.state.review_comment(comment_id)), status=201)
