"""`POST /webhooks/github` and `POST /webhooks/gitlab` (SPEC 11.2).

Hostile traffic is the normal case for a public endpoint (SPEC 15), so a delivery is
judged by its headers before its body is read: no signature header (GitHub) or a wrong
`X-Gitlab-Token` is 401, no delivery id (`X-GitHub-Delivery`, GitLab `Idempotency-Key` /
`X-Gitlab-Event-UUID`) is 400, a declared Content-Length over 1 MiB is 413. Only then is
the body read (`request_body.BodyReader`, shared with `/login`: the 1 MiB cap, the
deadlines, the process's budget of bytes in flight), the GitHub signature (HMAC-SHA256 of the raw body in
`X-Hub-Signature-256`, checked by githubkit's `verify`) verified, and a delivery id seen
before answered 200 and ignored. A refusal before the body was read closes the
connection, so the unread rest of a body never keeps it open.

A valid event is a hint, never a decision: it enqueues the task key (the claim still
checks the labels, the lease and who triggered it), or, for a comment or an unassign
on a task this process is running, makes the run look at the forge at its next
checkpoint. Events outside the configured scope, events we do not use and malformed
bodies enqueue nothing.

The few fields used (repository, number, action, label) are read from the JSON,
defensively, rather than through githubkit's typed `parse`: measured here, its first
parse of an event type costs 2-20 CPU-seconds (pydantic building the validators of the
event's union of actions; `pull_request` is the worst), which alone breaks SPEC 11.2's
"under 1 s to the first model request" and stalls the event loop's process.

Served by Starlette + uvicorn (already dependencies, and the replay model and the
sandbox forges use the same stack): small, async, and the dashboard adds its routes to
the same app (`web/app.py`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from coding_agent.config import AgentConfig, GitHubConfig, GitLabConfig
from coding_agent.domain.tasks import Forge, TaskKey, TaskKind, canonical_project
from coding_agent.errors import QueueUnavailable
from coding_agent.web.request_body import MAX_BODY_BYTES, BodyReader, Refusal, parse_json

__all__ = ["Hint", "WebhookSink", "webhook_routes", "github_hints", "gitlab_hints", "MAX_BODY_BYTES", "warm_up"]

log = logging.getLogger(__name__)

GITHUB_EVENTS = frozenset({"issues", "issue_comment", "pull_request", "pull_request_review_comment"})
# A GitHub App's installation events (SPEC 17): GitHub sends them to every app.
GITHUB_INSTALLATION_EVENTS = frozenset({"installation", "installation_repositories"})
GITLAB_EVENTS = frozenset({"Issue Hook", "Merge Request Hook", "Note Hook"})
# CI feedback (SPEC 16): used only with `ci.enabled`.
GITHUB_CI_EVENTS = frozenset({"check_suite", "check_run", "workflow_run", "status"})
GITLAB_CI_EVENTS = frozenset({"Pipeline Hook", "Job Hook"})

# new: a task that may carry the trigger label; followup: a comment on a task that may be
# done; steer: a comment or an (un)assignment that a running run should see now; ci: a
# commit's CI changed (the key is `forge:project@sha`: the watches of that commit look now).
# scope: a GitHub App's installation changed (repositories added or removed, suspended,
# deleted): the producer looks for work now, with the installation read again.
HintKind = Literal["new", "followup", "steer", "ci", "scope"]


@dataclass(frozen=True)
class Hint:
    key: str
    kind: HintKind


class WebhookSink(Protocol):
    """What the webhooks need of the runtime (implemented by `runtime/webhook_sink.py`)."""

    async def first_delivery(self, delivery_id: str) -> bool:
        """Record the delivery id; False when it was seen before."""
        ...

    async def accept(self, key: str, kind: HintKind) -> None:
        """`steer`: the running run of `key` looks at the forge at its next checkpoint;
        `new` / `followup`: enqueue the key (deduplicated); `ci`: the CI watches of the
        commit `key` names look at its checks now; `scope`: a GitHub App's installation
        changed, the producer looks for work now."""
        ...


def _answer(status: int, message: str) -> Response:
    return JSONResponse({"message": message}, status_code=status)


def _canonical(forge: str, project: Any) -> str | None:
    """The repository a verified event names, when it is canonical (SPEC 15: the forge's
    own name characters, no `.`/`..` segment, no escape); else None, and one log line
    naming it. A signature proves who sent the event, not that its names are safe: the
    scope check reads the first segment of `acme/../evil/x` as `acme`."""
    if not isinstance(project, str) or "/" not in project:
        return None
    try:
        return canonical_project(forge, project)
    except ValueError as error:
        log.warning("webhook %s: refused: %s", forge, error)
        return None


def _key(forge: Forge, project: str, change: bool, number: Any) -> str | None:
    """The task key of `number` in `project` (already canonical), built by the one
    `TaskKey` every route uses; None for a number that is no positive int."""
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        return None
    return str(TaskKey(forge, project, TaskKind.CHANGE if change else TaskKind.ISSUE, number))


def _refuse(status: int, message: str) -> Response:
    """An answer given before the whole body was read: the connection is closed after it,
    or the unread rest of the body would be left to keep it open."""
    return JSONResponse({"message": message}, status_code=status, headers={"Connection": "close"})


# -- GitHub ----------------------------------------------------------------------------


def _github_in_scope(config: GitHubConfig, full_name: str) -> bool:
    """As the configuration narrows it; a GitHub App without `owner`/`repos` takes every
    repository here, and the worker asks the source whether an installation holds it."""
    if config.repos:
        return full_name.casefold() in {repo.casefold() for repo in config.full_repos()}
    if config.owner is None:
        return config.app is not None
    return full_name.split("/", 1)[0].casefold() == config.owner.casefold()


def _field(data: Any, *path: str) -> Any:
    for name in path:
        data = data.get(name) if isinstance(data, dict) else None
    return data


def _ci_hint(forge: str, project: str, sha: Any) -> list[Hint]:
    """A hint for the watches of commit `sha`; [] for anything that is not a commit id."""
    if not isinstance(sha, str) or not 7 <= len(sha) <= 64 or not sha.isalnum():
        return []
    return [Hint(f"{forge}:{project}@{sha.lower()}", "ci")]


def _github_ci_hints(full_name: str, event: str, payload: Any) -> list[Hint]:
    """A check or status that finished: the commit's watches look now (a start changes
    nothing the watch decides on)."""
    if event == "status":
        finished = _field(payload, "state") in ("success", "failure", "error")
        return _ci_hint("github", full_name, _field(payload, "sha")) if finished else []
    if _field(payload, "action") != "completed":
        return []
    return _ci_hint("github", full_name, _field(payload, event, "head_sha"))


def github_hints(config: GitHubConfig, event: str, payload: Any) -> list[Hint]:
    """What a (verified) GitHub event means for the agent; [] for anything unexpected."""
    if event in GITHUB_INSTALLATION_EVENTS:
        # Any installation of the app on an account in scope (every account without
        # `owner`/`repos`): one added, removed, suspended or given repositories changes
        # which repositories are worked.
        account = _field(payload, "installation", "account", "login")
        if config.app is None or not isinstance(account, str):
            return []
        accounts = config.accounts()
        if accounts is not None and account.casefold() not in accounts:
            return []
        return [Hint(f"github:{account}", "scope")]
    full_name = _canonical("github", _field(payload, "repository", "full_name"))
    if full_name is None or not _github_in_scope(config, full_name):
        return []
    if event in GITHUB_CI_EVENTS:
        return _github_ci_hints(full_name, event, payload)
    action = _field(payload, "action")
    if event in ("issues", "issue_comment"):
        number = _field(payload, "issue", "number")
        separator = "!" if _field(payload, "issue", "pull_request") else "#"
    else:
        number = _field(payload, "pull_request", "number")
        separator = "!"
    key = _key("github", full_name, separator == "!", number)
    if key is None:
        return []
    if event in ("issues", "pull_request"):
        if action == "labeled" and _field(payload, "label", "name") == config.bot_label:
            return [Hint(key, "new")]
        if action == "labeled" and _field(payload, "label", "name") == config.stop_label:
            return [Hint(key, "steer")]  # the running run reads its labels at its next checkpoint
        if action == "assigned":
            return [Hint(key, "new"), Hint(key, "steer")]
        if action == "unassigned":
            return [Hint(key, "steer")]
        return []
    if action == "created":  # issue_comment, pull_request_review_comment
        return [Hint(key, "steer"), Hint(key, "followup")]
    return []


async def _github(request: Request, config: AgentConfig, sink: WebhookSink, reader: BodyReader) -> Response:
    secret = config.webhooks.github_secret.get_secret_value() if config.webhooks.github_secret else ""
    if not secret or config.github is None:
        return _refuse(404, "GitHub webhooks are not configured (webhooks.github_secret)")
    signature = request.headers.get("x-hub-signature-256", "")
    if not signature.startswith("sha256="):
        return _refuse(401, "missing or wrong X-Hub-Signature-256")
    delivery = request.headers.get("x-github-delivery", "")
    if not delivery:
        return _refuse(400, "no X-GitHub-Delivery header: a delivery without an id is refused")
    try:
        body = await reader.read(request)
    except Refusal as refusal:
        return _refuse(refusal.status, refusal.message)
    from githubkit.webhooks import verify  # imported once the first delivery comes (or warm_up)

    if not verify(secret, body, signature):
        return _answer(401, "missing or wrong X-Hub-Signature-256")
    event = request.headers.get("x-github-event", "")
    used = event in GITHUB_EVENTS or (config.github.app is not None and event in GITHUB_INSTALLATION_EVENTS)
    if not used and not (config.ci.enabled and event in GITHUB_CI_EVENTS):
        return _answer(202, f"event {event[:40]!r} is not used")
    if not await sink.first_delivery(f"github:{delivery[:150]}"):
        return _answer(200, "duplicate delivery ignored")
    try:
        payload = parse_json(body)
    except Refusal as refusal:
        return _answer(refusal.status, refusal.message)
    if not isinstance(payload, dict):
        return _answer(400, f"not a {event} event")
    return await _deliver(sink, github_hints(config.github, event, payload), "github", event)


# -- GitLab ----------------------------------------------------------------------------


def _gitlab_in_scope(config: GitLabConfig, project: dict[str, Any]) -> bool:
    path = project.get("path_with_namespace")
    if config.project_id is not None:
        wanted = str(config.project_id)
        return str(project.get("id")) == wanted or (isinstance(path, str) and path.casefold() == wanted.casefold())
    return isinstance(path, str) and path.casefold().startswith(f"{(config.group or '').casefold()}/")


_GITLAB_FINISHED = frozenset({"success", "failed", "canceled", "skipped"})


def gitlab_hints(config: GitLabConfig, event: str, payload: Any) -> list[Hint]:
    """What a (verified) GitLab event means for the agent; [] for anything unexpected."""
    if not isinstance(payload, dict):
        return []
    project = payload.get("project")
    if not isinstance(project, dict):
        return []
    path = _canonical("gitlab", project.get("path_with_namespace"))
    if path is None or not _gitlab_in_scope(config, project):
        return []
    if event == "Job Hook":  # a job's own fields are top-level
        finished = payload.get("build_status") in _GITLAB_FINISHED
        return _ci_hint("gitlab", path, payload.get("sha")) if finished else []
    attributes = payload.get("object_attributes")
    if not isinstance(attributes, dict):
        return []
    if event == "Pipeline Hook":
        finished = attributes.get("status") in _GITLAB_FINISHED
        return _ci_hint("gitlab", path, attributes.get("sha")) if finished else []
    if event == "Note Hook":
        noteable = attributes.get("noteable_type")
        target = payload.get("issue") if noteable == "Issue" else payload.get("merge_request")
        if noteable not in ("Issue", "MergeRequest") or not isinstance(target, dict):
            return []
        key = _key("gitlab", path, noteable != "Issue", target.get("iid"))
        return [Hint(key, "steer"), Hint(key, "followup")] if key is not None else []
    key = _key("gitlab", path, event != "Issue Hook", attributes.get("iid"))
    if key is None:
        return []
    changes = found if isinstance(found := payload.get("changes"), dict) else {}
    hints: list[Hint] = []
    labels = listed if isinstance(listed := payload.get("labels"), list) else []
    if any(isinstance(label, dict) and label.get("title") == config.bot_label for label in labels):
        hints.append(Hint(key, "new"))
    stop = any(isinstance(label, dict) and label.get("title") == config.stop_label for label in labels)
    if "assignees" in changes or "assignee_id" in changes or (stop and "labels" in changes):
        hints.append(Hint(key, "steer"))  # unassigned, or the stop label added: the run looks now
    return hints


async def _gitlab(request: Request, config: AgentConfig, sink: WebhookSink, reader: BodyReader) -> Response:
    token = config.webhooks.gitlab_token.get_secret_value() if config.webhooks.gitlab_token else ""
    if not token or config.gitlab is None:
        return _refuse(404, "GitLab webhooks are not configured (webhooks.gitlab_token)")
    given = request.headers.get("x-gitlab-token", "")
    if not hmac.compare_digest(given.encode(), token.encode()):
        return _refuse(401, "missing or wrong X-Gitlab-Token")
    delivery = request.headers.get("idempotency-key") or request.headers.get("x-gitlab-event-uuid") or ""
    if not delivery:
        return _refuse(400, "no X-Gitlab-Event-UUID header: a delivery without an id is refused")
    event = request.headers.get("x-gitlab-event", "")
    if event not in GITLAB_EVENTS and not (config.ci.enabled and event in GITLAB_CI_EVENTS):
        return _refuse(202, f"event {event[:40]!r} is not used")
    try:
        body = await reader.read(request)
    except Refusal as refusal:
        return _refuse(refusal.status, refusal.message)
    signing = config.webhooks.gitlab_signing_token
    if signing is not None and signing.get_secret_value():
        refused = gitlab_signature_refusal(signing.get_secret_value(), request.headers, body, time.time())
        if refused:
            return _answer(401, refused)
    if not await sink.first_delivery(f"gitlab:{delivery[:150]}"):
        return _answer(200, "duplicate delivery ignored")
    try:
        payload = parse_json(body)
    except Refusal as refusal:
        return _answer(refusal.status, refusal.message)
    return await _deliver(sink, gitlab_hints(config.gitlab, event, payload), "gitlab", event)


# A signed GitLab delivery older or newer than this is refused (a replayed capture).
SIGNATURE_TOLERANCE_SECONDS = 300


def gitlab_signature_refusal(token: str, headers: Mapping[str, str], body: bytes, now: float) -> str:
    """Why a GitLab delivery's signature is refused ("" when it is good): the Standard
    Webhooks scheme GitLab signs with, `webhook-signature: v1,<base64 HMAC-SHA256 of
    "webhook-id.webhook-timestamp.body">`, keyed by the signing token (`whsec_<base64>`:
    the bytes it encodes), within 5 minutes of `webhook-timestamp`."""
    delivery, stamp, signatures = (headers.get(name, "") for name in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not delivery or not stamp or not signatures:
        return "missing webhook-id, webhook-timestamp or webhook-signature"
    try:
        sent = int(stamp)
    except ValueError:
        return "webhook-timestamp is not a number"
    if abs(now - sent) > SIGNATURE_TOLERANCE_SECONDS:
        return "webhook-timestamp is too far from now"
    try:
        key = base64.b64decode(token.removeprefix("whsec_"), validate=True) if token.startswith("whsec_") else token.encode()
    except (binascii.Error, ValueError):
        key = token.encode()
    digest = hmac.new(key, f"{delivery}.{stamp}.".encode() + body, hashlib.sha256).digest()
    expected = base64.b64encode(digest).decode()
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            return ""
    return "wrong webhook-signature"


async def _deliver(sink: WebhookSink, hints: list[Hint], forge: str, event: str) -> Response:
    try:
        for hint in hints:
            await sink.accept(hint.key, hint.kind)
    except QueueUnavailable as error:  # the broker is away: the next poll finds the task all the same
        log.error("webhook %s %s: %s", forge, event, error)
        return _answer(503, "the task queue is unavailable; the next poll picks the task up")
    log.info("webhook %s %s: %s", forge, event, ", ".join(f"{h.kind} {h.key}" for h in hints) or "nothing to do")
    return _answer(202 if hints else 200, "accepted" if hints else "nothing to do")


_Handler = Callable[[Request, AgentConfig, WebhookSink, BodyReader], Awaitable[Response]]


def webhook_routes(config: AgentConfig, sink: WebhookSink, reader: BodyReader | None = None) -> list[Route]:
    """Both endpoints, reading their bodies with `reader`: the process's one reader (shared
    with `/login`, so its budget of bytes in flight bounds them all), or one of their own."""
    if reader is None:
        reader = BodyReader(config.webhooks.body_timeout_seconds)

    def endpoint(handler: _Handler) -> Callable[[Request], Awaitable[Response]]:
        async def route(request: Request) -> Response:
            return await handler(request, config, sink, reader)

        return route

    return [
        Route("/webhooks/github", endpoint(_github), methods=["POST"]),
        Route("/webhooks/gitlab", endpoint(_gitlab), methods=["POST"]),
    ]


def warm_up() -> None:
    """Import githubkit's webhook helpers ahead of the first delivery (about 1-4 s),
    in a worker thread at server start."""
    from githubkit.webhooks import verify  # noqa: F401
