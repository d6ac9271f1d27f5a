"""GitHub Apps in the GitHub testing server: apps, installations, JWTs and installation tokens.

As on github.com: the app signs a JWT (RS256, `iss` its id, `exp` at most 10 minutes
ahead) with its private key, and the server checks it against the app's public key;
the JWT lists the app's installations and trades for an installation token, narrowed
on request to some of the installation's repositories and permissions. That token
authenticates as `<slug>[bot]` until it expires (a configurable lifetime, seconds in
tests), then every request with it is a 401. The tokens refused for having expired are
counted, so tests can show that a client never sends an expired token twice.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from coding_agent.sandbox.github.accounts import Accounts
from coding_agent.sandbox.github.records import AppRecord, AppTokenRecord, InstallationRecord, MintRecord
from coding_agent.sandbox.github.tables import NotFoundError

__all__ = ["Apps", "AppAuthError", "MintRefused", "JWT_MAX_LIFETIME", "new_key_pair"]

# GitHub refuses a JWT whose `exp` is more than 10 minutes after its `iat`/now.
JWT_MAX_LIFETIME = 600
# What an app asks for when it names none: the permissions SPEC 17's manifest lists.
DEFAULT_APP_PERMISSIONS = {
    "contents": "write",
    "issues": "write",
    "pull_requests": "write",
    "checks": "read",
    "statuses": "read",
    "actions": "read",
    "metadata": "read",
}
_LEVELS = {"read": 1, "write": 2, "admin": 3}


class AppAuthError(Exception):
    """A JWT the server refuses (HTTP 401), with GitHub's wording."""


class MintRefused(Exception):
    """A token request the server refuses: `status` (403 suspended, 404, 422) and GitHub's words."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Apps(Accounts):
    """The apps, their installations and the installation tokens they minted."""

    def add_app(
        self,
        slug: str,
        public_key_pem: str,
        *,
        owner: str = "app-owner",
        token_lifetime: float = 3600.0,
        permissions: dict[str, str] | None = None,
        events: tuple[str, ...] = (),
    ) -> AppRecord:
        """Register an app (and its bot user `<slug>[bot]`); its installation tokens live
        `token_lifetime` seconds."""
        with self._lock:
            app = AppRecord(
                id=self._new_id(),
                slug=slug,
                name=slug.replace("-", " ").title(),
                owner=owner,
                public_key_pem=public_key_pem,
                token_lifetime=token_lifetime,
                permissions=dict(permissions or DEFAULT_APP_PERMISSIONS),
                events=events,
            )
            self._apps[app.id] = app
            self.add_user(owner)
            self.add_user(app.bot_login, bot=True)
            return app

    def install_app(
        self, app_id: int, account: str, repos: list[str] | None = None, *, suspended: bool = False
    ) -> InstallationRecord:
        """Install the app on `account`: on `repos` (full names), or on all its repositories
        now. The bot gets write access to each, as an installation grants."""
        with self._lock:
            app = self._apps[app_id]
            selection = "selected" if repos is not None else "all"
            owned = [r.full_name for r in self._repos.values() if r.owner.lower() == account.lower()]
            chosen = repos if repos is not None else owned
            names = tuple(self.repo(name).full_name for name in chosen)
            installation = InstallationRecord(
                id=self._new_id(),
                app_id=app_id,
                account=account,
                repos=names,
                repository_selection=selection,
                permissions=dict(app.permissions),
                suspended=suspended,
            )
            self._installations[installation.id] = installation
            self.add_user(account)
            for name in names:
                self.set_permission(name, app.bot_login, "write")
            return installation

    def set_installation_repos(self, installation_id: int, repos: list[str]) -> None:
        """Change the repositories an installation holds (what an owner does in the app's settings)."""
        with self._lock:
            installation = self._installations[installation_id]
            bot = self._apps[installation.app_id].bot_login
            for name in installation.repos:
                self.set_permission(name, bot, None)
            names = tuple(self.repo(name).full_name for name in repos)
            for name in names:
                self.set_permission(name, bot, "write")
            self._installations[installation_id] = _replace(installation, repos=names, repository_selection="selected")

    def uninstall(self, installation_id: int) -> None:
        """The owner removed the app from the account: its tokens and repositories go."""
        with self._lock:
            installation = self._installations.pop(installation_id)
            bot = self._apps[installation.app_id].bot_login
            for name in installation.repos:
                self.set_permission(name, bot, None)

    def suspend_installation(self, installation_id: int, suspended: bool = True) -> None:
        with self._lock:
            self._installations[installation_id] = _replace(self._installations[installation_id], suspended=suspended)

    def app(self, app_id: int) -> AppRecord:
        with self._lock:
            return self._apps[app_id]

    def apps(self) -> list[AppRecord]:
        with self._lock:
            return list(self._apps.values())

    def installations(self, app_id: int) -> list[InstallationRecord]:
        with self._lock:
            return [i for i in self._installations.values() if i.app_id == app_id]

    def installation(self, installation_id: int) -> InstallationRecord:
        with self._lock:
            if installation_id not in self._installations:
                raise NotFoundError(f"installation {installation_id} not found")
            return self._installations[installation_id]

    # ---------------------------------------------------------------- the manifest flow

    def approve_manifest(self, manifest: dict[str, Any], owner: str = "app-owner") -> str:
        """What a person does on github.com with a posted manifest: confirm it. Returns the
        one-time code GitHub hands the manifest's `redirect_url`."""
        code = secrets.token_hex(10)
        with self._lock:
            self._manifests[code] = (dict(manifest), owner)
        return code

    def convert_manifest(self, code: str) -> tuple[AppRecord, str, str]:
        """`POST /app-manifests/{code}/conversions`: the app made from the manifest, its
        private key (PEM) and webhook secret; a code is good once (`NotFoundError` after)."""
        with self._lock:
            found = self._manifests.pop(code, None)
        if found is None:
            raise NotFoundError(f"manifest code {code} not found")
        manifest, owner = found
        private, public = new_key_pair()
        slug = "-".join(str(manifest.get("name") or "app").lower().split())
        app = self.add_app(
            slug,
            public,
            owner=owner,
            permissions=dict(manifest.get("default_permissions") or {}),
            events=tuple(manifest.get("default_events") or ()),
        )
        return app, private, secrets.token_hex(20)

    # ---------------------------------------------------------------- JWTs and tokens

    def app_for_jwt(self, token: str) -> AppRecord:
        """The app whose key signed `token`, checked as GitHub checks it; else `AppAuthError`."""
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
            app_id = int(claims["iss"])
        except (jwt.PyJWTError, KeyError, TypeError, ValueError):
            raise AppAuthError("A JSON web token could not be decoded") from None
        with self._lock:
            app = self._apps.get(app_id)
        if app is None:
            raise AppAuthError("Integration not found")
        now = time.time()
        try:
            claims = jwt.decode(
                token, app.public_key_pem, algorithms=["RS256"], options={"require": ["exp", "iat", "iss"]}, leeway=0
            )
        except jwt.ExpiredSignatureError:
            raise AppAuthError(
                "'Expiration time' claim ('exp') must be a numeric value representing the future time "
                "at which the assertion expires"
            ) from None
        except jwt.ImmatureSignatureError:
            raise AppAuthError(
                "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"
            ) from None
        except jwt.PyJWTError:
            raise AppAuthError("A JSON web token could not be decoded") from None
        if float(claims["exp"]) - now > JWT_MAX_LIFETIME + 5:
            raise AppAuthError("'Expiration time' claim ('exp') is too far in the future")
        return app

    def mint_installation_token(
        self,
        app: AppRecord,
        installation_id: int,
        repositories: list[str] | None = None,
        permissions: dict[str, str] | None = None,
    ) -> AppTokenRecord:
        """An installation token, narrowed to `repositories` (names, as GitHub takes them:
        without the owner) and `permissions` when given; `MintRefused` as GitHub refuses."""
        with self._lock:
            try:
                return self._mint(app, installation_id, repositories, permissions)
            except MintRefused as refused:
                self._record_mint(installation_id, repositories, permissions, refused.status)
                raise

    def _mint(
        self, app: AppRecord, installation_id: int, repositories: list[str] | None, permissions: dict[str, str] | None
    ) -> AppTokenRecord:
        installation = self._installations.get(installation_id)
        if installation is None or installation.app_id != app.id:
            raise MintRefused(404, "Not Found")
        if installation.suspended:
            raise MintRefused(403, "This installation has been suspended")
        repos: tuple[str, ...] | None = None
        if repositories is not None:
            held = {name.split("/", 1)[1].lower(): name for name in installation.repos}
            wanted = [held.get(name.lower()) for name in repositories]
            if not repositories or any(name is None for name in wanted):
                message = "There is at least one repository that does not exist or is not accessible to the parent installation."
                raise MintRefused(422, message)
            repos = tuple(name for name in wanted if name is not None)
        granted = dict(installation.permissions)
        if permissions is not None:
            for name, level in permissions.items():
                if _LEVELS.get(level, 99) > _LEVELS.get(granted.get(name, ""), 0):
                    raise MintRefused(422, "The permissions requested are not granted to this installation.")
            granted = dict(permissions)
        token = AppTokenRecord(
            token="ghs_" + secrets.token_urlsafe(27),
            installation_id=installation_id,
            repos=repos,
            permissions=granted,
            expires_at=time.time() + app.token_lifetime,
        )
        self._app_tokens[token.token] = token
        self._tokens[token.token] = app.bot_login
        self._record_mint(installation_id, repositories, permissions, 201)
        return token

    def _record_mint(
        self, installation_id: int, repositories: list[str] | None, permissions: dict[str, str] | None, status: int
    ) -> None:
        names = tuple(repositories) if repositories is not None else None
        self._mints.append(MintRecord(installation_id, names, dict(permissions) if permissions else None, status))

    def login_for_token(self, token: str) -> str | None:
        """As `Accounts.login_for_token`; an installation token past its expiry is refused
        (and counted in `expired_token_uses`)."""
        with self._lock:
            minted = self._app_tokens.get(token)
            if minted is not None and time.time() >= minted.expires_at:
                self._expired_uses[token] = self._expired_uses.get(token, 0) + 1
                return None
            if minted is not None:
                installation = self._installations.get(minted.installation_id)
                if installation is None or installation.suspended:
                    return None  # a suspended or removed installation's tokens stop working at once
            return super().login_for_token(token)

    def expire_app_tokens(self) -> None:
        """Make every installation token minted so far expire now (a revoked or lapsed token)."""
        with self._lock:
            now = time.time()
            for value, minted in list(self._app_tokens.items()):
                self._app_tokens[value] = replace(minted, expires_at=min(minted.expires_at, now))

    def app_token(self, token: str) -> AppTokenRecord | None:
        """The installation token `token` is, if it is one."""
        with self._lock:
            return self._app_tokens.get(token)

    def token_allows_repo(self, token: str, full_name: str) -> bool:
        """Whether `token` may reach `full_name`: every token but an installation token
        narrowed to other repositories may (the permission check comes after)."""
        minted = self.app_token(token)
        return minted is None or full_name.lower() in {name.lower() for name in self.token_repos(minted)}

    def token_repos(self, minted: AppTokenRecord) -> tuple[str, ...]:
        """The repositories `minted` reaches now: those it was narrowed to, else the
        installation's current ones (an owner may add or remove some meanwhile)."""
        with self._lock:
            if minted.repos is not None:
                return minted.repos
            return self._installations[minted.installation_id].repos

    def mints(self) -> list[MintRecord]:
        """Every installation token request, oldest first."""
        with self._lock:
            return list(self._mints)

    def app_tokens(self) -> list[AppTokenRecord]:
        """Every installation token minted, oldest first (tests grep files for them)."""
        with self._lock:
            return list(self._app_tokens.values())

    def expired_token_uses(self) -> dict[str, int]:
        """Installation token -> how many requests came with it after it expired."""
        with self._lock:
            return dict(self._expired_uses)


def _replace(record: InstallationRecord, **changes: Any) -> InstallationRecord:
    return replace(record, **changes)


def new_key_pair() -> tuple[str, str]:
    """A random 2048-bit RSA key pair as an app's (private, public) PEM: the private half
    PKCS#1, as GitHub hands it out."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private.decode(), public.decode()
