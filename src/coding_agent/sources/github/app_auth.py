"""A GitHub App's credentials (SPEC 17): the JWT, installation tokens, and when to renew them.

The app signs a JWT with its private key (PyJWT over `cryptography`, RS256: `iat` 60 s in
the past, `exp` 9 minutes ahead, `iss` the app id) and trades it for installation tokens
(`POST /app/installations/{id}/access_tokens`). Each run gets its own token for its
task's repository (`run_scope`), narrowed to that one repository and to the permissions
a run needs: its requests and git pushes carry a token that reaches nothing else. Requests that name no repository
(the search, GraphQL) carry a token of a whole installation: the one a poll names for
its search (`INSTALLATION_HEADER`), else within a run the installation of the run's
repository, else the only installation in scope.

The app's scope is every repository of every installation (`in_scope`: narrowed to
`installation_id`, and by the source to `github.owner` / `github.repos`); a repository's
tokens are minted from the installation on its account. A suspended installation is
left out (one log line while it stays so).

Tokens are kept in this process only, each until shortly before its `expires_at` (5
minutes, or half its life for the short-lived tokens of tests): a poll or a run's step
asks this cache, not GitHub, so minting costs no request per task per poll, and a run
longer than a token's life gets a fresh one before the old one runs out. A token the
forge refuses (401) is dropped and the request is sent once more with a fresh one.

`InstallationAuth` is the `httpx.Auth` githubkit sends every request through; git gets
the same tokens through `git_header(project)`, handed to git per command by the host.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import jwt
from githubkit import GitHubCore
from githubkit.auth import BaseAuthStrategy

from coding_agent.config import GitHubAppConfig
from coding_agent.errors import ConfigError, ForgeError, TransientError
from coding_agent.sources.http import transient_status

__all__ = [
    "APP_EVENTS",
    "INSTALLATION_HEADER",
    "APP_PERMISSIONS",
    "AppTokens",
    "AppAuthStrategy",
    "InstallationAuth",
    "Installation",
    "RENEW_AHEAD_SECONDS",
    "load_private_key",
]

# What the agent needs of an installation (SPEC 17): the manifest asks for these, and
# `doctor` warns about any an installation lacks.
APP_PERMISSIONS: dict[str, str] = {
    "contents": "write",
    "issues": "write",
    "pull_requests": "write",
    "checks": "read",
    "statuses": "read",
    "actions": "read",
    "metadata": "read",
}
# The webhook events it reacts to (GitHub sends `installation` and
# `installation_repositories` to every app without a subscription).
APP_EVENTS: tuple[str, ...] = (
    "issues",
    "issue_comment",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "check_run",
    "check_suite",
    "workflow_run",
    "status",
)

log = logging.getLogger(__name__)

# A request that names no repository (a poll's search, an installation's repository list)
# names the installation whose token it carries in this header; `InstallationAuth` takes
# it off before the request is sent.
INSTALLATION_HEADER = "X-Coding-Agent-Installation"
# The installations are read again after this long even without a webhook (a new one on
# an agent that gets no webhooks): one request with the app's JWT.
INSTALLATIONS_TTL_SECONDS = 600.0
# (api url, app id, installation id) of the suspended installations already logged: one
# line per process while one stays suspended, whichever of its sources (the service's,
# a preflight's) sees it first.
_TOLD_SUSPENDED: set[tuple[str, int, int]] = set()

# How many recently minted tokens the redactor masks (every live one is among them).
ISSUED_KEPT = 256
# The run (`AppTokens.run_scope`) the current task belongs to; "" outside any run.
_RUN: ContextVar[str] = ContextVar("coding_agent_app_run", default="")

# Renew a token this long before it expires (SPEC 17: at least 5 minutes ahead).
RENEW_AHEAD_SECONDS = 300.0
# GitHub refuses a JWT that lives longer than 10 minutes; 9 leaves room for clock drift.
JWT_LIFETIME_SECONDS = 540
# The JWT's `iat` is set this far in the past, as GitHub advises, against clock drift.
JWT_BACKDATE_SECONDS = 60


@dataclass(frozen=True)
class Installation:
    id: int
    account: str
    suspended: bool
    permissions: tuple[tuple[str, str], ...] = ()
    events: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        """What the agent needs that this installation was not granted (for `doctor`)."""
        held = dict(self.permissions)
        levels = {"read": 1, "write": 2, "admin": 3}
        gaps = [
            f"{name}: {level}" for name, level in APP_PERMISSIONS.items() if levels.get(held.get(name, ""), 0) < levels[level]
        ]
        return gaps


class _NotInstalled(Exception):
    """The repository is in no installation of the app (handled in `AppTokens.token`)."""


@dataclass
class _Token:
    value: str
    renew_at: float


def load_private_key(config: GitHubAppConfig) -> str:
    """The app's private key in PEM form, from `private_key` (or GITHUB_APP_PRIVATE_KEY)
    or `private_key_file`; a `ConfigError` naming the key when it is missing or no key."""
    if config.private_key is not None and config.private_key.get_secret_value().strip():
        pem, where = config.private_key.get_secret_value(), "github.app.private_key"
    else:
        where = "github.app.private_key_file"
        try:
            pem = Path(str(config.private_key_file)).expanduser().read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"{where}: cannot read {config.private_key_file}: {error.strerror or error}") from None
    pem = pem.strip().replace("\\n", "\n") + "\n"  # a key pasted into one env line keeps its \n
    try:
        jwt.encode({"iss": "check"}, pem, algorithm="RS256")
    except Exception:  # PyJWT and cryptography raise several kinds for a bad key; none holds the key
        raise ConfigError(f"{where}: not an RSA private key in PEM form (the .pem file GitHub gave for the app)") from None
    return pem


def repository_of(path: str, base_path: str) -> str | None:
    """`owner/name` of a `/repos/{owner}/{name}/...` request under the API's `base_path`."""
    if base_path and path.startswith(base_path):
        path = path[len(base_path) :]
    parts = path.split("/")
    if len(parts) < 4 or parts[1] != "repos" or not parts[2] or not parts[3]:
        return None
    return f"{unquote(parts[2])}/{unquote(parts[3])}"


class AppTokens:
    """The app's JWT and its installation tokens, one per repository plus one per installation.

    `clock` is wall-clock time (tokens expire at a wall-clock `expires_at`)."""

    def __init__(
        self,
        config: GitHubAppConfig,
        api_url: str,
        owner: str | None,
        timeout: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._key = load_private_key(config)
        self._owner = owner
        self._clock = clock
        self._api_url = api_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=api_url.rstrip("/"),
            timeout=timeout,
            headers={"Accept": "application/vnd.github+json", "User-Agent": "coding-agent", "X-GitHub-Api-Version": "2022-11-28"},
        )
        self._tokens: dict[str, _Token] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._installations: list[Installation] | None = None
        self._installations_read = 0.0
        # run -> the installation of its repository (its requests naming no repository use it)
        self._run_installation: dict[str, int] = {}
        self._slug: str | None = None
        # The tokens minted lately: what `secrets` hands the redactor (bounded: a serve
        # running for months mints one per run).
        self._issued: deque[str] = deque(maxlen=ISSUED_KEPT)

    # ------------------------------------------------------------ the app itself

    def app_jwt(self) -> str:
        now = int(self._clock())
        claims = {"iat": now - JWT_BACKDATE_SECONDS, "exp": now + JWT_LIFETIME_SECONDS, "iss": str(self._config.app_id)}
        return jwt.encode(claims, self._key, algorithm="RS256")

    async def _as_app(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request with the app's JWT; errors name the app, never the key or a token."""
        what = f"github {method} {path}"
        try:
            response = await self._http.request(method, path, headers={"Authorization": f"Bearer {self.app_jwt()}"}, **kwargs)
        except httpx.TimeoutException:
            raise TransientError(f"{what} timed out") from None
        except httpx.TransportError as error:
            raise TransientError(f"{what} failed: connection error ({type(error).__name__})") from None
        if transient_status(response.status_code, response.headers):
            raise TransientError(f"{what} failed: HTTP {response.status_code}")
        if response.status_code == 401:
            raise ForgeError(
                f"{what} failed: GitHub refused the app's JWT ({_message(response)}): check github.app.app_id "
                f"({self._config.app_id}) and github.app.private_key, and that this machine's clock is right"
            )
        if response.status_code >= 400:
            raise ForgeError(f"{what} failed: HTTP {response.status_code}: {_message(response)}")
        return response

    async def slug(self) -> str:
        """The app's slug (`GET /app`): its bot is `<slug>[bot]`."""
        if self._slug is None:
            data = (await self._as_app("GET", "/app")).json()
            self._slug = str(data["slug"])
        return self._slug

    async def bot_login(self) -> str:
        return f"{await self.slug()}[bot]"

    async def installations(self, refresh: bool = False) -> list[Installation]:
        """The app's installations (`GET /app/installations`), read once until `refresh`."""
        stale = self._clock() - self._installations_read > INSTALLATIONS_TTL_SECONDS
        if self._installations is None or refresh or stale:
            found: list[Installation] = []
            page = 1
            while True:
                chunk = (await self._as_app("GET", "/app/installations", params={"per_page": 100, "page": page})).json()
                found += [
                    Installation(
                        int(item["id"]),
                        str(item["account"]["login"]),
                        item.get("suspended_at") is not None,
                        tuple(sorted((str(k), str(v)) for k, v in (item.get("permissions") or {}).items())),
                        tuple(str(e) for e in item.get("events") or ()),
                    )
                    for item in chunk
                ]
                if len(chunk) < 100:
                    break
                page += 1
            self._installations = found
            self._installations_read = self._clock()
        return self._installations

    async def in_scope(self, accounts: set[str] | None = None) -> list[Installation]:
        """The installations whose repositories are worked: `installation_id`'s alone when
        set, else every one (on `accounts` only, casefolded, when given), a suspended one
        left out with one log line (again only once it was unsuspended meanwhile)."""
        chosen: list[Installation] = []
        for installation in await self.installations():
            if self._config.installation_id is not None and installation.id != self._config.installation_id:
                continue
            if accounts is not None and installation.account.casefold() not in accounts:
                continue
            told = (self._api_url, self._config.app_id, installation.id)
            if installation.suspended:
                if told not in _TOLD_SUSPENDED:
                    _TOLD_SUSPENDED.add(told)
                    log.warning(
                        "github app %s: installation %d on %s is suspended: its tasks are not started",
                        self._config.app_id, installation.id, installation.account,
                    )
                continue
            _TOLD_SUSPENDED.discard(told)
            chosen.append(installation)
        return chosen

    async def holder(self, owner: str) -> Installation | None:
        """The installation on `owner`'s account (`installation_id`'s only, when set)."""
        for installation in await self.installations():
            if self._config.installation_id is not None and installation.id != self._config.installation_id:
                continue
            if installation.account.casefold() == owner.casefold():
                return installation
        return None

    async def installation_for(self, owner: str) -> int:
        """The installation that holds `owner`'s repositories (`installation_id`'s only)."""
        installation = await self.holder(owner)
        if installation is None:
            chosen = self._config.installation_id
            where = f"installation {chosen}" if chosen is not None else "any installation"
            raise ForgeError(f"github app {self._config.app_id}: {owner} is not in {where} of the app (install it there)")
        if installation.suspended:
            raise ForgeError(f"github app {self._config.app_id}: its installation {installation.id} on {owner} is suspended")
        return installation.id

    async def _default_installation(self) -> int:
        """The installation of a request that names neither a repository nor an
        installation, outside any run's repository: `installation_id`, `github.owner`'s,
        else the first in scope. Such requests read public data (a user's profile, the
        app's bot's own), which any installation's token reads alike."""
        if self._config.installation_id is not None:
            return self._config.installation_id
        if self._owner is not None:
            return await self.installation_for(self._owner)
        installations = await self.in_scope()
        if not installations:
            raise ForgeError(f"github app {self._config.app_id}: no installation in scope (install the app, or unsuspend it)")
        return installations[0].id

    # ------------------------------------------------------------ installation tokens

    @contextmanager
    def run_scope(self) -> Iterator[None]:
        """The block of one run (the worker's `Source.session`): the repository tokens its
        requests and git commands use are its own, minted when it first needs one and
        dropped when it ends; a resumed run gets fresh ones. Outside any run (a poll),
        the repository tokens are shared."""
        run = secrets.token_hex(8)
        reset = _RUN.set(run)
        try:
            yield
        finally:
            _RUN.reset(reset)
            self._run_installation.pop(run, None)
            for scope in [scope for scope in self._tokens if scope.startswith(f"{run} ")]:
                del self._tokens[scope]
                self._locks.pop(scope, None)

    async def token(self, repository: str | None, installation: int | None = None) -> str:
        """A live token for `repository` (`owner/name`, narrowed to it, the run's own within
        `run_scope`) or, for None, of a whole installation (`installation`, else the run's,
        else `_default_installation`); minted only when none is cached or it is near expiry."""
        if repository is None and installation is None:
            installation = self._run_installation.get(_RUN.get()) or await self._default_installation()
        scope = f"{_RUN.get()} {repository.lower()}" if repository else f"installation {installation}"
        cached = self._tokens.get(scope)
        if cached is not None and self._clock() < cached.renew_at:
            return cached.value
        lock = self._locks.setdefault(scope, asyncio.Lock())
        async with lock:
            cached = self._tokens.get(scope)
            if cached is not None and self._clock() < cached.renew_at:
                return cached.value
            try:
                minted = await self._mint(repository, installation)
            except _NotInstalled:
                # A repository outside the installations (a contributor's public fork a PR
                # comes from): read with the installation's own token, which reaches no
                # more than the installation does.
                return await self.token(None)
            self._tokens[scope] = minted
            return minted.value

    async def _mint(self, repository: str | None, installation: int | None) -> _Token:
        body: dict[str, Any] = {}
        if repository is not None:
            # The installation on the repository's account mints its token.
            holder = await self.holder(repository.split("/", 1)[0])
            if holder is None:
                raise _NotInstalled(repository)
            installation = await self.installation_for(holder.account)
            if _RUN.get():
                self._run_installation.setdefault(_RUN.get(), installation)
            body["repositories"] = [repository.split("/", 1)[1]]
            body["permissions"] = await self._run_permissions(installation)
        assert installation is not None
        started = self._clock()
        path = f"/app/installations/{installation}/access_tokens"
        try:
            response = await self._as_app("POST", path, json=body)
        except ForgeError as error:
            self._installations = None  # read them again: the installation changed
            app = f"github app {self._config.app_id}"
            if "suspended" in str(error):
                raise ForgeError(f"{app}: its installation {installation} is suspended; nothing is started") from None
            if "HTTP 404" in str(error):
                raise ForgeError(f"{app}: its installation {installation} was removed (the app is uninstalled)") from None
            if repository is not None and "HTTP 422" in str(error):
                raise _NotInstalled(repository) from None
            raise
        data = response.json()
        value = str(data["token"])
        expires = datetime.fromisoformat(str(data["expires_at"]).replace("Z", "+00:00")).timestamp()
        lifetime = max(expires - started, 0.0)
        self._issued.append(value)
        return _Token(value, expires - min(RENEW_AHEAD_SECONDS, lifetime / 2))

    async def _run_permissions(self, installation: int) -> dict[str, str]:
        """What a run needs (`APP_PERMISSIONS`), as far as the installation holds it: a
        token asks for no more (least privilege) and for nothing the installation lacks
        (GitHub would refuse the whole mint)."""
        held = next((dict(i.permissions) for i in await self.installations() if i.id == installation), {})
        levels = {"read": 1, "write": 2, "admin": 3}
        wanted: dict[str, str] = {}
        for name, level in APP_PERMISSIONS.items():
            have = held.get(name)
            if have is not None and have in levels:
                wanted[name] = level if levels[have] >= levels[level] else have
        return wanted

    def forget(self, token: str) -> None:
        """Drop `token` (the forge refused it): the next request mints a fresh one."""
        for scope, cached in list(self._tokens.items()):
            if cached.value == token:
                del self._tokens[scope]

    def forget_all(self) -> None:
        """Drop every token and what is known of the installations (their scope changed)."""
        self._tokens.clear()
        self._installations = None

    async def request_as_installation(self, method: str, path: str, installation: int, **kwargs: Any) -> httpx.Response:
        """One request with the whole installation's token (for `doctor`'s look at the scope)."""
        token = await self.token(None, installation)
        response = await self._http.request(method, path, headers={"Authorization": f"token {token}"}, **kwargs)
        if response.status_code >= 400:
            raise ForgeError(f"github {method} {path} failed: {_message(response)}")
        return response

    async def git_header(self, project: str) -> str:
        """The `Authorization` header git sends for `project`: `x-access-token:<token>`."""
        credentials = base64.b64encode(f"x-access-token:{await self.token(project)}".encode()).decode()
        return f"Authorization: Basic {credentials}"

    def secrets(self) -> list[str]:
        """Every token minted so far, for redaction."""
        return list(self._issued)

    async def aclose(self) -> None:
        await self._http.aclose()


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    message = body.get("message") if isinstance(body, dict) else None
    return f"HTTP {response.status_code}: {str(message)[:200]}" if message else f"HTTP {response.status_code}"


class InstallationAuth(httpx.Auth):
    """Puts the right installation token on each request githubkit sends, and sends a
    request refused with 401 once more with a fresh token (never an expired one twice)."""

    def __init__(self, tokens: AppTokens, api_url: str) -> None:
        self._tokens = tokens
        self._base_path = urlsplit(api_url).path.rstrip("/")

    def sync_auth_flow(self, request: httpx.Request) -> Any:
        raise RuntimeError("the GitHub App's tokens are used from async code only")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        repository = repository_of(request.url.path, self._base_path)
        named = request.headers.pop(INSTALLATION_HEADER, "")
        installation = int(named) if named.isdigit() and repository is None else None
        if installation is not None:
            # One URL (the installation's repository list) answers differently for each
            # installation: the conditional-request cache keeps one answer per installation.
            request.extensions = {**request.extensions, "cache_partition": f"installation {installation}"}
        token = await self._tokens.token(repository, installation)
        request.headers["Authorization"] = f"token {token}"
        response = yield request
        if response.status_code == 401:
            self._tokens.forget(token)
            request.headers["Authorization"] = f"token {await self._tokens.token(repository, installation)}"
            yield request


class AppAuthStrategy(BaseAuthStrategy):
    """githubkit's auth strategy for `InstallationAuth` (githubkit calls `get_auth_flow`)."""

    def __init__(self, tokens: AppTokens, api_url: str) -> None:
        self._auth = InstallationAuth(tokens, api_url)

    def get_auth_flow(self, github: GitHubCore[Any]) -> httpx.Auth:
        return self._auth
