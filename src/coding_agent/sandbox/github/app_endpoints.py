"""The GitHub App endpoints of the testing server, in GitHub's shapes.

`GET /app`, `GET /app/installations` and `POST /app/installations/{id}/access_tokens`
take the app's JWT (the middleware checks it and puts the app on `request.state.app`);
`GET /installation/repositories` takes an installation token.
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from coding_agent.sandbox.github.apps import MintRefused
from coding_agent.sandbox.github.endpoints import Endpoints
from coding_agent.sandbox.github.http import ApiError, json_reply, paginate
from coding_agent.sandbox.github.records import AppRecord, InstallationRecord

__all__ = ["AppEndpoints", "APP_PATHS"]

# Paths authenticated by the app's JWT rather than a token.
APP_PATHS = ("/app", "/app/")


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AppEndpoints(Endpoints):
    """The app's own endpoints and an installation's repository list."""

    def _app_json(self, app: AppRecord) -> dict[str, Any]:
        return {
            "id": app.id,
            "slug": app.slug,
            "node_id": f"A_{app.id}",
            "name": app.name,
            "owner": {"login": app.owner, "id": self.state.user(app.owner).id, "type": "Organization"},
            "permissions": app.permissions,
            "events": list(app.events),
            "installations_count": len(self.state.installations(app.id)),
        }

    def _installation_json(self, installation: InstallationRecord, app: AppRecord) -> dict[str, Any]:
        account = self.state.user(installation.account)
        return {
            "id": installation.id,
            "app_id": app.id,
            "app_slug": app.slug,
            "account": {"login": account.login, "id": account.id, "type": account.type},
            "repository_selection": installation.repository_selection,
            "permissions": installation.permissions,
            "events": list(app.events),
            "suspended_at": "2026-01-01T00:00:00Z" if installation.suspended else None,
            "target_type": "Organization",
        }

    async def get_app(self, request: Request) -> Response:
        return json_reply(request, self._app_json(request.state.app))

    async def list_installations(self, request: Request) -> Response:
        app: AppRecord = request.state.app
        items = [self._installation_json(i, app) for i in self.state.installations(app.id)]
        page, link = paginate(request, items)
        return json_reply(request, page, link=link)

    async def create_installation_token(self, request: Request) -> Response:
        app: AppRecord = request.state.app
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise ApiError(400, "Problems parsing JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "Problems parsing JSON")
        repositories = body.get("repositories")
        permissions = body.get("permissions")
        if repositories is not None and not (isinstance(repositories, list) and all(isinstance(r, str) for r in repositories)):
            raise ApiError(422, "Invalid request: repositories must be a list of names")
        if permissions is not None and not isinstance(permissions, dict):
            raise ApiError(422, "Invalid request: permissions must be an object")
        try:
            token = self.state.mint_installation_token(app, request.path_params["installation_id"], repositories, permissions)
        except MintRefused as refused:
            raise ApiError(refused.status, refused.message) from None
        render = self._render(request)
        payload = {
            "token": token.token,
            "expires_at": _iso(token.expires_at),
            "permissions": token.permissions,
            "repository_selection": (
                "selected" if repositories is not None else self.state.installation(token.installation_id).repository_selection
            ),
            "repositories": [render.repo(self.state.repo(name)) for name in self.state.token_repos(token)],
        }
        return json_reply(request, payload, status=201)

    async def installation_repositories(self, request: Request) -> Response:
        token = self.state.app_token(request.state.token)
        if token is None:
            raise ApiError(
                403, "You must authenticate with an installation access token in order to list repositories for an installation."
            )
        render = self._render(request)
        repos = [render.repo(self.state.repo(name)) for name in self.state.token_repos(token)]
        page, link = paginate(request, repos)
        installation = self.state.installation(token.installation_id)
        payload = {"total_count": len(repos), "repository_selection": installation.repository_selection, "repositories": page}
        return json_reply(request, payload, link=link)

    async def convert_manifest(self, request: Request) -> Response:
        """`POST /app-manifests/{code}/conversions` (no authentication, as on GitHub)."""
        app, pem, webhook_secret = self.state.convert_manifest(request.path_params["code"])
        payload = {
            **self._app_json(app),
            "pem": pem,
            "webhook_secret": webhook_secret,
            "client_id": f"Iv1.{app.id:016x}",
            "client_secret": secrets.token_hex(20),
        }
        return json_reply(request, payload, status=201)
