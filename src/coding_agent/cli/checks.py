"""Health checks of a deployment: `coding-agent doctor` runs them all, and the preflight of
`run --once` / `serve` runs the forge and LLM ones before anything is claimed (SPEC 11).

Each check returns one `Check` (a line of output). Checks talk to the real services with
the maintained clients the agent itself uses (githubkit, python-gitlab, openai, ollama,
the MCP client), but only through read-only calls: the bot user, a repository
permission, the model list — never a write, and no chat request but `doctor`'s one small
model probe (`tool_call_probe`: does the server return tool calls, and in what form). Every
detail passes through the redactor, so a token that a server echoes back is never printed.

The checks run concurrently. Only the client libraries the config uses are imported
(`_load_clients`; openai alone takes seconds on a loaded machine), in a worker thread
while the MCP servers, separate processes, are already starting, and outside any check's
deadline, so a slow import never reads as a dead service.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from coding_agent.agent.environment import describe_egress
from coding_agent.config import AgentConfig, GitHubConfig, GitLabConfig, MCPServerConfig, OllamaConfig
from coding_agent.errors import ToolsRefused
from coding_agent.llm.context_window import DEFAULT_CONTEXT_LENGTH, ollama_window, reported_context_window
from coding_agent.llm.factory import create_llm_client, load_client_library
from coding_agent.llm.text_tool_calls import find_text_tool_calls
from coding_agent.llm.types import LLMReply, ToolSpec
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy
from coding_agent.store.state import StateStore
from coding_agent.tools.sandbox import bwrap_usable

__all__ = ["Check", "forge_checks", "llm_check", "tool_call_probe", "preflight", "run_doctor"]

_CHECK_TIMEOUT_SECONDS = 10.0
_GITLAB_ROLES = {10: "guest", 15: "planner", 20: "reporter", 30: "developer", 40: "maintainer", 50: "owner"}


@dataclass(frozen=True)
class Check:
    """One line of `doctor`: what was checked, whether it is fine, and what was seen."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.name}: {self.detail}"


def _describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{error.__class__.__name__}: {text}" if text else error.__class__.__name__


async def _guarded(
    name: str, check: Callable[[], Awaitable[Check]], redactor: Redactor, timeout: float = _CHECK_TIMEOUT_SECONDS
) -> Check:
    """Run one check with a deadline; any error is that check's failure, redacted."""
    try:
        result = await asyncio.wait_for(check(), timeout)
    except TimeoutError:
        result = Check(name, False, f"no answer within {timeout:g} s")
    except Exception as error:  # noqa: BLE001 - a check reports, it never raises
        result = Check(name, False, _describe(error))
    return Check(result.name, result.ok, redactor.text(result.detail))


# ------------------------------------------------------------------------------ forge


async def _github_app(config: GitHubConfig, name: str) -> Check:
    """A GitHub App (SPEC 17): its JWT accepted, its installations, the repositories in scope."""
    from coding_agent.errors import AgentError
    from coding_agent.sources.github.app_auth import APP_EVENTS, AppTokens

    assert config.app is not None
    try:
        tokens = AppTokens(config.app, config.api_url, config.owner, timeout=8)
    except AgentError as error:  # the key cannot be read or is no key
        return Check(name, False, str(error))
    gaps: list[str] = []
    scope: list[str] = []
    try:
        bot = await tokens.bot_login()
        installations = await tokens.installations()
        parts = [f"GitHub App {config.app.app_id} (bot @{bot})"]
        parts += [f"installed on {i.account}{' (suspended)' if i.suspended else ''}" for i in installations]
        chosen = await tokens.in_scope(config.accounts())
        if not chosen:
            parts.append("no installation in scope (install the app, or check github.owner / installation_id)")
        wanted = {repo.lower() for repo in config.full_repos()}
        for installation in chosen:
            missing_permissions = installation.missing()
            gaps += missing_permissions
            if missing_permissions:
                parts.append(
                    f"installation {installation.id} lacks permissions {', '.join(missing_permissions)} "
                    "(grant them in the app's settings)"
                )
            unheard = [e for e in APP_EVENTS if e not in installation.events]
            if unheard:
                parts.append(f"warning: the app does not subscribe to {', '.join(unheard)} (webhooks only; polling still works)")
            response = await tokens.request_as_installation(
                "GET", "/installation/repositories", installation.id, params={"per_page": 100}
            )
            names = [str(repo["full_name"]) for repo in response.json().get("repositories", [])]
            held = [n for n in names if not wanted or n.lower() in wanted]
            scope += held
            parts.append(f"installation {installation.id}: {', '.join(held) or 'no repository'} in scope")
    except AgentError as error:
        return Check(name, False, str(error))
    finally:
        await tokens.aclose()
    missing = sorted(wanted - {n.lower() for n in scope})
    if missing:
        parts.append(f"not installed on: {', '.join(missing)}")
    if config.bot_name and config.bot_name.lower() != bot.lower():
        parts.append(f"bot_name is {config.bot_name!r} but the app's bot is @{bot}")
        return Check(name, False, "; ".join(parts))
    return Check(name, bool(scope) and not missing and not gaps, "; ".join(parts))


def _forge_modules(config: AgentConfig) -> list[str]:
    """The client libraries the forge checks of `config` need."""
    names = [name for name in ("github", "gitlab") if name in config.sources]
    return ["githubkit" if name == "github" else "gitlab" for name in names]


def _load(config: AgentConfig) -> None:
    """The forge libraries, and the model's as a run loads it (its lazily loaded parts
    too, which the LLM check's client would otherwise load on the event loop)."""
    # On an ImportError the check that needs the library imports it again and reports it.
    for name in _forge_modules(config):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    with contextlib.suppress(ImportError):
        load_client_library(config.llm)


async def _load_clients(config: AgentConfig) -> None:
    await asyncio.to_thread(_load, config)


async def _github(config: GitHubConfig) -> Check:
    from githubkit import GitHub
    from githubkit.exception import RequestFailed

    name = f"forge github {config.api_url}"
    if config.app is not None:
        return await _github_app(config, name)
    if config.token is None or not config.token.get_secret_value():
        return Check(name, False, "no token (github.token or GITHUB_TOKEN, or github.app)")
    github: GitHub[Any] = GitHub(config.token.get_secret_value(), base_url=config.api_url, auto_retry=False, timeout=8)
    try:
        response = await github.rest.users.async_get_authenticated()
    except RequestFailed as error:
        status = error.response.status_code
        return Check(name, False, f"the token is refused (HTTP {status})" if status in (401, 403) else f"HTTP {status}")
    login = response.parsed_data.login
    scopes = response.headers.get("x-oauth-scopes")
    parts = [f"bot user @{login}", f"token scopes: {scopes}" if scopes is not None else "fine-grained token"]
    ok = True
    if config.bot_name and config.bot_name.lower() != login.lower():
        parts.append(f"bot_name is {config.bot_name!r} but the token is @{login}")
        ok = False
    assert config.owner is not None  # required with a token (GitHubConfig)
    for repo in config.repos:
        try:
            permission = await github.rest.repos.async_get_collaborator_permission_level(config.owner, repo, login)
            role = permission.parsed_data.role_name or permission.parsed_data.permission
        except RequestFailed as error:
            role = f"unknown (HTTP {error.response.status_code})"
        writes = role in ("write", "maintain", "admin")
        ok = ok and writes
        parts.append(f"{config.owner}/{repo}: {role}{'' if writes else ' (needs write)'}")
    if not config.repos:
        parts.append(f"scope: every repository of {config.owner} the token can see")
    return Check(name, ok, "; ".join(parts))


def _gitlab_sync(config: GitLabConfig) -> Check:
    import gitlab

    name = f"forge gitlab {config.api_url}"
    if config.token is None or not config.token.get_secret_value():
        return Check(name, False, "no token (gitlab.token or GITLAB_TOKEN)")
    url = config.api_url.rstrip("/").removesuffix("/api/v4")
    client = gitlab.Gitlab(url, private_token=config.token.get_secret_value(), timeout=8, retry_transient_errors=False)
    try:
        client.auth()
    except gitlab.exceptions.GitlabAuthenticationError as error:
        return Check(name, False, f"the token is refused (HTTP {error.response_code})")
    user = client.user
    assert user is not None
    parts = [f"bot user @{user.username}", _gitlab_token_kind(user)]
    ok = True
    expiry, expired = _gitlab_token_expiry(client)
    if expiry:
        parts.append(expiry)
        ok = not expired
    if config.bot_name and config.bot_name.lower() != str(user.username).lower():
        parts.append(f"bot_name is {config.bot_name!r} but the token is @{user.username}")
        ok = False
    if config.project_id is not None:
        project = client.projects.get(config.project_id)
        try:
            level = int(project.members_all.get(user.id).access_level)
        except gitlab.exceptions.GitlabGetError:
            level = 0
        role = _GITLAB_ROLES.get(level, f"level {level}" if level else "not a member")
        ok = ok and level >= 30
        parts.append(f"project {config.project_id}: {role}{'' if level >= 30 else ' (needs developer)'}")
    elif config.group is not None:  # the config requires one of the two
        group = client.groups.get(config.group)
        parts.append(f"group {group.full_path}: visible")
    return Check(name, ok, "; ".join(parts))


# Warn this many days before a GitLab token expires (SPEC 17).
_GITLAB_EXPIRY_WARNING_DAYS = 14


def _gitlab_token_kind(user: Any) -> str:
    """Project and group access tokens act as bot users named `project_<id>_bot...` /
    `group_<id>_bot...`; any other token is a personal one."""
    name = str(getattr(user, "username", ""))
    if getattr(user, "bot", False) and name.startswith("project_"):
        return "project access token"
    if getattr(user, "bot", False) and name.startswith("group_"):
        return "group access token"
    return "personal access token"


def _gitlab_token_expiry(client: Any) -> tuple[str, bool]:
    """(what to say of the token's expiry, whether it has expired), from
    `GET /personal_access_tokens/self` (GitLab 15.5+; older ones say nothing)."""
    import datetime as dt

    import gitlab

    try:
        data = client.http_get("/personal_access_tokens/self")
    except gitlab.exceptions.GitlabError:
        return "", False
    expires = data.get("expires_at") if isinstance(data, dict) else None
    if not expires:
        return "the token does not expire", False
    try:
        day = dt.date.fromisoformat(str(expires)[:10])
    except ValueError:
        return "", False
    left = (day - dt.datetime.now(dt.UTC).date()).days
    if left < 0:
        return f"the token expired on {day.isoformat()}: make a new one", True
    if left <= _GITLAB_EXPIRY_WARNING_DAYS:
        return f"warning: the token expires on {day.isoformat()}, in {left} day(s): renew it", False
    return f"the token expires on {day.isoformat()}", False


def forge_checks(config: AgentConfig) -> list[tuple[str, Callable[[], Awaitable[Check]]]]:
    """The forge check of every configured source (the bot user, token scopes, role)."""
    checks: list[tuple[str, Callable[[], Awaitable[Check]]]] = []
    if "github" in config.sources and config.github is not None:
        github = config.github
        checks.append((f"forge github {github.api_url}", lambda: _github(github)))
    if "gitlab" in config.sources and config.gitlab is not None:
        gitlab_config = config.gitlab
        checks.append((f"forge gitlab {gitlab_config.api_url}", lambda: asyncio.to_thread(_gitlab_sync, gitlab_config)))
    return checks


# -------------------------------------------------------------------------------- llm


def llm_name(config: AgentConfig) -> str:
    """`llm <provider> <where>`: the check's name, naming the server it talks to."""
    section = config.llm.active
    return f"llm {config.llm.provider} {section.endpoint if isinstance(section, OllamaConfig) else section.base_url}"


async def llm_check(config: AgentConfig, require_model: bool = True) -> Check:
    """The model-listing endpoint answers and lists the configured model (never a chat).

    `require_model=False` (the preflight): a server that answers but does not list the
    model passes with a note; some OpenAI-compatible servers list aliases only.
    """
    llm = config.llm
    section = llm.active
    model = section.model or ""
    name = llm_name(config)
    if isinstance(section, OllamaConfig):  # llm.provider: ollama
        import ollama

        endpoint = section.endpoint
        client = ollama.AsyncClient(host=endpoint, timeout=8)
        listed = await client.list()
        names = {entry.model for entry in listed.models}
        if model not in names and f"{model}:latest" not in names:
            return Check(name, not require_model, f"model {model!r} is not pulled (ollama pull {model})")
        if not require_model:  # the preflight: the listing is enough
            return Check(name, True, f"model {model} present")
        shown = await client.show(model)
        return _window_check(name, config, f"model {model} present", ollama_window(shown.model_dump(by_alias=True)))
    import openai

    base_url = section.base_url
    api_key = getattr(section, "api_key", None)
    api = openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key.get_secret_value() if api_key else "not-needed", timeout=8, max_retries=0
    )
    try:
        try:
            page = await api.models.list()
        except openai.AuthenticationError:
            return Check(name, False, "the API key is refused (HTTP 401)")
        ids = [entry.id async for entry in page]
    finally:
        await api.close()
    if model not in ids:
        some = ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
        return Check(name, not require_model, f"model {model!r} is not listed (the server has: {some or 'none'})")
    if not require_model:
        return Check(name, True, f"model {model} listed")
    return _window_check(name, config, f"model {model} listed", await reported_context_window(config.llm))


def _window_check(name: str, config: AgentConfig, found: str, window: int | None) -> Check:
    """`found` and the model's context window (SPEC 5.1): FAIL when the server's window is
    smaller than `context_length` (requests would be cut or refused before compression)."""
    llm = config.llm
    configured = llm.active.context_length
    key = f"llm.{llm.provider}.context_length"
    sent = "num_ctx sent" if llm.provider == "ollama" else key
    if window is None:
        used = f"{sent} {configured}" if configured is not None else f"{key} unset: {DEFAULT_CONTEXT_LENGTH} is used"
        return Check(name, True, f"{found}; the server reports no context window; {used}")
    if configured is None:
        return Check(name, True, f"{found}; context window {window} reported by the server, used as {key} is not set")
    detail = f"{found}; {sent} {configured}, the model supports {window}"
    if window < configured:
        return Check(name, False, f"{detail}: the server's window is smaller: lower {key} to {window} or leave it unset")
    return Check(name, True, detail)


# ------------------------------------------------------------------- the model probe

PROBE_CHECK = "llm tool calling"
_PROBE_TOOL = ToolSpec(
    name="doctor/echo",
    description="Echo the given text back. Harmless: it only returns its input.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)
_PROBE_SYSTEM = "You are checking that tool calling works. Call the tool you are given when asked."
_PROBE_ASK = 'Call the tool doctor/echo with the argument {"text": "ping"}. Reply with the tool call only.'
_PROBE_MAX_TOKENS = 1024
# vLLM's parser for a format the model wrote as text (`--tool-call-parser`).
_VLLM_PARSERS = {
    "hermes": "hermes",
    "qwen3_coder": "qwen3_coder",
    "glm45": "glm45",
    "mistral": "mistral",
    "llama3": "llama3_json",
    "llama3_json": "llama3_json",
    "llama4_pythonic": "llama4_pythonic",
    "pythonic": "pythonic",
    "deepseek": "deepseek_v3",
    "harmony": "openai",
    "kimi_k2": "kimi_k2",
    "granite": "granite",
    "internlm2": "internlm",
    "phi4": "phi4_mini_json",
}


def _text_format(reply: LLMReply) -> str:
    """The open-model format of a tool call the reply holds as text ("" when none), read
    by the same module the runs read replies with (SPEC 5.1)."""
    return find_text_tool_calls(reply.content, [_PROBE_TOOL]).format


def _structured_hint(provider: str, text_format: str) -> str:
    if provider == "ollama":
        return "an Ollama model whose template has tools (ollama show MODEL lists `tools` under Capabilities)"
    if provider == "lmstudio":
        return "a model LM Studio lists with tool_use (GET /api/v0/models, capabilities)"
    parser = _VLLM_PARSERS.get(text_format, "<the model's parser>")
    return f"vLLM: --enable-auto-tool-choice --tool-call-parser {parser}; llama.cpp: --jinja"


async def tool_call_probe(config: AgentConfig) -> Check:
    """One small round trip offering one harmless tool (SPEC 5.1): does the server return
    structured tool calls, a tool call as text (which format), refuse tools, or answer
    without calling? And which `llm.function_calling` suits it."""
    llm = config.llm.model_copy(deep=True)
    llm.active.max_tokens = min(llm.active.max_tokens, _PROBE_MAX_TOKENS)
    setting = llm.function_calling
    shown = str(setting).lower()
    client = create_llm_client(llm, RetryPolicy(retries=0))
    client.set_tools([_PROBE_TOOL])
    client.send_system_prompt(_PROBE_SYSTEM)
    client.send_user_message(_PROBE_ASK)
    try:
        reply = await client.get_response()
    except ToolsRefused as refusal:
        detail = (
            f"the server refuses tools ({refusal.server_words!r}): use llm.function_calling: auto "
            f"(it goes on in JSON text by itself) or false; you have {shown}"
        )
        return Check(PROBE_CHECK, setting is not True, detail)
    finally:
        await client.aclose()
    if reply.tool_calls:
        names = ", ".join(call.name for call in reply.tool_calls)
        detail = f"structured tool calls ({names}): llm.function_calling: auto or true works; you have {shown}"
        return Check(PROBE_CHECK, True, detail)
    text_format = _text_format(reply)
    if text_format:
        detail = (
            f"the server returned the tool call as text ({text_format} format), not structured: the agent reads it "
            f"with llm.function_calling: auto or true (you have {shown}); for structured calls: "
            f"{_structured_hint(llm.provider, text_format)}"
        )
        return Check(PROBE_CHECK, True, detail)
    said = " ".join(reply.content.split())[:80]
    detail = (
        f"the model answered without calling the tool ({said!r}): use llm.function_calling: false "
        f"(JSON in text); you have {shown}"
    )
    return Check(PROBE_CHECK, setting is False, detail)


# ------------------------------------------------------------------ tools, sandbox, db


async def _mcp_server(config: AgentConfig, server: MCPServerConfig) -> Check:
    from coding_agent.tools.hub import ToolHub  # the MCP SDK: doctor's check only, never the preflight

    name = f"mcp server {server.mcp_server_name}"
    with tempfile.TemporaryDirectory(prefix="coding-agent-doctor-") as workspace:
        async with ToolHub([server], config.tools, Path(workspace), config.secrets()) as hub:
            tools = [spec.name.split("/", 1)[1] for spec in hub.tool_specs]
    listed = ", ".join(tools[:8]) + (" ..." if len(tools) > 8 else "")
    return Check(name, bool(tools), f"started; {len(tools)} tool(s): {listed}" if tools else "started but lists no tool")


async def _sandbox(config: AgentConfig) -> Check:
    mode = getattr(config.security, "sandbox", "auto")
    if mode == "none":
        return Check("sandbox", True, "security.sandbox: none - commands run UNSANDBOXED (warned at every start)")
    if shutil.which("bwrap") is None:
        return Check("sandbox", False, "bwrap not found (Debian package bubblewrap), or set security.sandbox: none")
    with tempfile.TemporaryDirectory(prefix="coding-agent-doctor-") as workspace:
        usable = await asyncio.to_thread(bwrap_usable, Path(workspace).resolve())
    if not usable:
        return Check("sandbox", False, "bwrap is installed but cannot create namespaces here")
    return Check(
        "sandbox",
        True,
        "bwrap works: commands see no network, a private /tmp and PID namespace, the system read-only; "
        "only the workspace is writable and the agent's environment (tokens) is not passed in",
    )


async def _egress(config: AgentConfig) -> Check:
    """SPEC 7.1: where the setup comes from and what the sandbox may reach (never a failure
    unless hosts are listed and the forwarder the sandbox needs, python3 or socat, is missing)."""
    lines = describe_egress(config)
    return Check("setup and egress", not any(line.startswith("forwarder:") for line in lines), "; ".join(lines))


async def _database(config: AgentConfig) -> Check:
    def probe() -> int:
        store = StateStore(config.database.url)
        try:
            return len(store.runs.all())
        finally:
            store.close()

    runs = await asyncio.to_thread(probe)
    shown = make_url(config.database.url).render_as_string(hide_password=True)
    return Check("database", True, f"{shown}: schema ready, {runs} run(s) recorded")


async def _queue(config: AgentConfig) -> Check:
    queue: Any = getattr(config, "queue", None)
    backend = getattr(queue, "backend", "memory")
    if backend != "rabbitmq":
        return Check("queue", True, "memory (in-process; nothing to reach)")
    import aio_pika
    from yarl import URL

    url = str(queue.url)
    connection = await aio_pika.connect_robust(url, timeout=8)
    await connection.close()
    return Check("queue", True, f"rabbitmq {URL(url).with_password(None).with_user(None)} reachable")


async def run_doctor(config: AgentConfig, config_source: str) -> list[Check]:
    """Every check, concurrently; one `Check` each, in a fixed order."""
    redactor = Redactor(config.secrets())
    first = Check("config", True, f"{config_source}: valid (task_source {', '.join(config.sources)}, llm {config.llm.provider})")
    named: list[tuple[str, Callable[[], Awaitable[Check]]]] = [
        *forge_checks(config),
        (llm_name(config), lambda: llm_check(config)),
        (PROBE_CHECK, lambda: tool_call_probe(config)),
        *((f"mcp server {s.mcp_server_name}", (lambda s=s: _mcp_server(config, s))) for s in config.mcp_servers),
        ("sandbox", lambda: _sandbox(config)),
        ("setup and egress", lambda: _egress(config)),
        ("database", lambda: _database(config)),
        ("queue", lambda: _queue(config)),
    ]
    # An MCP server gets its configured start-up time (capped): starting a process is
    # slower than an HTTP answer, and a loaded machine must not read as a broken server.
    startup = min(config.tools.startup_timeout_seconds, 30.0)
    # The MCP servers start first (their processes load on another core), the client
    # libraries load meanwhile, then every other check starts.
    tasks = {
        name: asyncio.create_task(_guarded(name, check, redactor, startup))
        for name, check in named
        if name.startswith("mcp server")
    }
    await _load_clients(config)
    for name, check in named:
        # The probe waits for the model's answer: a local model may first have to load.
        timeout = _CHECK_TIMEOUT_SECONDS
        if name == PROBE_CHECK:
            timeout = max(_CHECK_TIMEOUT_SECONDS, min(config.llm.active.timeout_seconds, 120.0))
        tasks.setdefault(name, asyncio.create_task(_guarded(name, check, redactor, timeout)))
    return [first, *[await tasks[name] for name, _ in named]]


async def preflight(config: AgentConfig) -> list[Check]:
    """The forge and LLM checks that must pass before `run --once` / `serve` claim anything;
    returns the failed ones (empty: go ahead)."""
    redactor = Redactor(config.secrets())
    named = [*forge_checks(config), (llm_name(config), lambda: llm_check(config, require_model=False))]
    await _load_clients(config)
    results = await asyncio.gather(*(_guarded(name, check, redactor) for name, check in named))
    return [result for result in results if not result.ok]
