"""GitHub App keys and JWTs for tests: a fresh RSA key per test, JWTs signed as GitHub asks."""

from __future__ import annotations

import time
from dataclasses import dataclass

import jwt

from coding_agent.sandbox.github.apps import new_key_pair

__all__ = ["AppKey", "new_app_key", "app_jwt"]


@dataclass(frozen=True)
class AppKey:
    private_pem: str
    public_pem: str


def new_app_key() -> AppKey:
    """A random 2048-bit RSA key pair, PEM encoded (PKCS#1 for the private half, as GitHub hands it out)."""
    return AppKey(*new_key_pair())


def app_jwt(app_id: int, private_pem: str, *, issued: float | None = None, lifetime: float = 540) -> str:
    """The JWT an app sends: `iat` 60 s in the past, `exp` `lifetime` s after now, `iss` the app id."""
    now = time.time() if issued is None else issued
    claims = {"iat": int(now - 60), "exp": int(now + lifetime), "iss": str(app_id)}
    return jwt.encode(claims, private_pem, algorithm="RS256")
