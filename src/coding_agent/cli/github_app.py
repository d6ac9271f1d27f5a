"""`coding-agent github-app manifest` and `convert`: make the GitHub App in two commands (SPEC 17).

`manifest` prints the app manifest (the permissions and webhook events the agent uses,
no more) and serves a page on this machine that posts it to GitHub's manifest flow;
GitHub then sends the browser back to the page with a one-time code, which the page
converts at once as `convert` does (`convert CODE` again if that failed). `convert CODE`
trades the code for the app (`POST /app-manifests/{code}/conversions`), writes its id,
private key and webhook secret to files only the agent's user can read, and prints the
config lines that use them.
"""

from __future__ import annotations

import html
import json
import os
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

import httpx
import typer

from coding_agent.sources.github.app_auth import APP_EVENTS, APP_PERMISSIONS

__all__ = ["manifest", "convert", "app_manifest"]


def app_manifest(name: str, public_url: str | None, redirect_url: str | None) -> dict[str, Any]:
    """The manifest GitHub's flow takes: name, webhook, the permissions and events the agent uses."""
    manifest: dict[str, Any] = {
        "name": name,
        "url": public_url or "https://github.com/",
        "public": False,
        "default_permissions": dict(APP_PERMISSIONS),
        "default_events": list(APP_EVENTS),
    }
    if public_url:
        manifest["hook_attributes"] = {"url": f"{public_url.rstrip('/')}/webhooks/github", "active": True}
    else:
        manifest["hook_attributes"] = {"url": "https://example.invalid/webhooks/github", "active": False}
    if redirect_url:
        manifest["redirect_url"] = redirect_url
    return manifest


def _page(manifest: dict[str, Any], action: str) -> bytes:
    value = html.escape(json.dumps(manifest), quote=True)
    return (
        "<!doctype html><meta charset=utf-8><title>Create the coding-agent GitHub App</title>"
        f"<form method=post action=\"{html.escape(action, quote=True)}\">"
        f"<input type=hidden name=manifest value=\"{value}\">"
        "<p>This creates the GitHub App with the permissions and events the agent uses.</p>"
        "<button type=submit>Create the GitHub App on GitHub</button></form>"
    ).encode()


def manifest(
    owner: Annotated[
        str | None, typer.Option("--owner", help="Create the app in this organisation (default: your account).")
    ] = None,
    public_url: Annotated[
        str | None,
        typer.Option(
            "--public-url", help="Where the agent's web app is reached: the webhook goes to URL/webhooks/github."
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", help="The app's name on GitHub.")] = "coding-agent",
    web_url: Annotated[str, typer.Option("--web-url", help="GitHub's web address (GitHub Enterprise: https://HOST).")] = "https://github.com",
    port: Annotated[int, typer.Option("--port", help="The local page's port (0: any free one).")] = 0,
    no_page: Annotated[bool, typer.Option("--no-page", help="Print the manifest only; serve no page.")] = False,
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the conversion writes the key and the webhook secret.")
    ] = Path("."),
    api_url: Annotated[str, typer.Option("--api-url", help="GitHub's API (GitHub Enterprise: https://HOST/api/v3).")] = "https://api.github.com",
) -> None:
    """Print the GitHub App manifest and serve a local page that posts it to GitHub; the
    code GitHub sends back to the page is converted at once (as `convert` does)."""
    if no_page:
        typer.echo(json.dumps(app_manifest(name, public_url, None), indent=2))
        return
    state = secrets.token_urlsafe(16)
    codes: list[str] = []
    done = threading.Event()
    base = web_url.rstrip("/")
    action = f"{base}/organizations/{owner}/settings/apps/new" if owner else f"{base}/settings/apps/new"
    action += f"?state={state}"
    holder: dict[str, Any] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            """Quiet: the command prints what matters."""

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            if url.path == "/callback":
                if query.get("state") != [state] or not query.get("code"):
                    self._answer(400, b"unexpected callback: the state does not match this command's")
                    return
                codes.append(query["code"][0])
                self._answer(200, b"The app is created. Back in the terminal: its key is written and the config lines printed.")
                done.set()
                return
            if url.path != "/":
                self._answer(404, b"not found")
                return
            self._answer(200, _page(holder["manifest"], action), "text/html; charset=utf-8")

        def _answer(self, status: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    local = f"http://127.0.0.1:{server.server_address[1]}"
    holder["manifest"] = app_manifest(name, public_url, f"{local}/callback")
    typer.echo(json.dumps(holder["manifest"], indent=2))
    typer.echo(f"\nOpen {local}/ in a browser on this machine and confirm on GitHub.", err=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        done.wait()
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        server.shutdown()
        server.server_close()
    typer.echo("")
    if _convert(codes[0], directory, api_url) != 0:
        typer.echo(f"\nThe conversion failed; to try again: coding-agent github-app convert {codes[0]} --dir {directory}")
        raise typer.Exit(1)


def _write_private(path: Path, text: str) -> None:
    """`text` into `path`, readable and writable by this user only (made so before writing)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)


def convert(
    code: Annotated[str, typer.Argument(help="The code GitHub sent back to the manifest page.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to write the key and the webhook secret.")] = Path("."),
    api_url: Annotated[str, typer.Option("--api-url", help="GitHub's API (GitHub Enterprise: https://HOST/api/v3).")] = "https://api.github.com",
) -> None:
    """Trade the manifest flow's code for the app; write its key and webhook secret (0600)."""
    status = _convert(code, directory, api_url)
    if status:
        raise typer.Exit(status)


def _convert(code: str, directory: Path, api_url: str) -> int:
    """`convert`'s work; the exit status (0: the app's files are written, its config printed)."""
    if not code.replace("-", "").replace("_", "").isalnum():
        typer.echo("github-app convert: the code is letters and digits, as GitHub sent it", err=True)
        return 2
    url = f"{api_url.rstrip('/')}/app-manifests/{code}/conversions"
    try:
        response = httpx.post(url, headers={"Accept": "application/vnd.github+json", "User-Agent": "coding-agent"}, timeout=30)
    except httpx.HTTPError as error:
        typer.echo(f"github-app convert: cannot reach {api_url}: {type(error).__name__}", err=True)
        return 1
    if response.status_code != 201:
        detail = ""
        try:
            detail = str(response.json().get("message", ""))[:200]
        except ValueError:
            pass
        hint = " (a code is good once, for an hour)" if response.status_code == 404 else ""
        typer.echo(f"github-app convert: GitHub answered HTTP {response.status_code} {detail}{hint}".rstrip(), err=True)
        return 1
    data = response.json()
    directory.mkdir(parents=True, exist_ok=True)
    slug = str(data["slug"])
    key_path = (directory / f"{slug}.private-key.pem").resolve()
    secret_path = (directory / f"{slug}.webhook-secret").resolve()
    _write_private(key_path, str(data["pem"]))
    _write_private(secret_path, str(data.get("webhook_secret") or ""))
    owner = (data.get("owner") or {}).get("login", "OWNER")
    typer.echo(f"Created the GitHub App {data.get('name', slug)} (id {data['id']}); its bot is @{slug}[bot].")
    typer.echo(f"Wrote {key_path} and {secret_path} (readable by this user only).")
    typer.echo("Install the app on your repositories (its settings page, Install App), then add to config.yaml:\n")
    typer.echo("github:")
    typer.echo(f"  # owner: {owner}   # optional: only this account's installation (default: every installation)")
    typer.echo("  app:")
    typer.echo(f"    app_id: {data['id']}")
    typer.echo(f"    private_key_file: {key_path}")
    typer.echo("webhooks:")
    typer.echo("  github_secret: ${GITHUB_WEBHOOK_SECRET}   # export GITHUB_WEBHOOK_SECRET=\"$(cat " + str(secret_path) + ")\"")
    return 0
