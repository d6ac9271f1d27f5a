"""`coding-agent demo`: one whole task on this machine with nothing configured (SPEC 12).

A sandbox GitHub (the testing server, with a real git repository behind it), the real
built-in MCP workspace server, and the replay model (a scripted model that says so), or
the operator's own model with `--llm`. It prints each event as it happens and ends with
the issue's labels and comments and the draft pull request that holds the change.

`demo --serve` keeps it running as a playground: the sandbox forge's page for people
(`sandbox/github/playground.py`), the dashboard, and the agent working whatever is
labelled there, the replay model making a small scripted change for any issue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from importlib import resources
from pathlib import Path
from typing import Any

import typer
import yaml

from coding_agent.config import AgentConfig, LLMConfig, parse_config
from coding_agent.logging_setup import configure_logging
from coding_agent.redaction import Redactor
from coding_agent.runtime.service import AgentService
from coding_agent.runtime.shutdown import GracefulShutdown
from coding_agent.sandbox.github import GitHubSandbox
from coding_agent.sandbox.github.apps import new_key_pair
from coding_agent.sandbox.github.playground import Playground
from coding_agent.sandbox.replay_model import ReplaySandbox, ReplayScript
from coding_agent.sources.writes import strip_marker

__all__ = ["run_demo", "run_playground", "ServeHttp", "DEMO_REPO", "DEMO_BOT", "DEMO_USER"]

DEMO_REPO = "demo/hello-world"
DEMO_USER = "octocat"
DEMO_BOT = "coding-agent-bot"
DEMO_APP = "coding-agent-demo"  # `demo --app`: the app's slug; its bot is `coding-agent-demo[bot]`

# Serves the dashboard of a service while the block runs, yielding its URL (or None).
ServeHttp = Callable[[AgentConfig, AgentService], AbstractAsyncContextManager[str | None]]


def _demo_script(planning: bool = False) -> ReplayScript:
    name = "scripts/demo_planning.yaml" if planning else "scripts/demo.yaml"
    text = resources.files("coding_agent.sandbox").joinpath(name).read_text(encoding="utf-8")
    return ReplayScript.from_dict(yaml.safe_load(text))


def _bot_token() -> str:
    """The sandbox forge's bot token, drawn per run: a fixed one would let any user of this
    machine act as the bot on the forge's loopback port while the demo runs."""
    return "demo-" + secrets.token_urlsafe(24)


def _config(
    forge_url: str,
    token: str,
    llm: dict[str, Any],
    directory: Path,
    sandbox_none: bool,
    planning: bool = False,
    keep: bool = False,
) -> dict[str, Any]:
    """The demo's config; `keep` (`--dir`): the run's clone stays for the user to look at."""
    security: dict[str, Any] = {"sandbox": "none"} if sandbox_none else {}
    return {
        **({"planning": {"enabled": True}} if planning else {}),
        "security": security,
        "task_source": "github",
        "github": {"api_url": forge_url, "token": token, "owner": "demo", "bot_name": DEMO_BOT},
        "llm": llm,
        "workspace": {"base_dir": str(directory / "workspaces"), "keep_finished": keep},
        "context_storage": {"base_dir": str(directory / "contexts")},
        "logging": {"dir": str(directory / "logs")},
        "database": {"url": f"sqlite:///{directory / 'state.db'}"},
        "retry": {"base_delay_seconds": 0.2},
        "max_llm_process_num": 20,
    }


def _seed_repository(sandbox: GitHubSandbox, token: str) -> None:
    """The demo's repository, its maintainer and the bot (with write access, `token`)."""
    state = sandbox.state
    state.add_user(DEMO_USER)
    state.add_user(DEMO_BOT, token=token, bot=True)
    state.add_repo(DEMO_REPO)
    state.init_repo(DEMO_REPO, files={"README.md": "# hello-world\n\nThe repository of `coding-agent demo`.\n"})
    state.set_permission(DEMO_REPO, DEMO_USER, "admin")
    state.set_permission(DEMO_REPO, DEMO_BOT, "write")


def _seed(sandbox: GitHubSandbox, token: str) -> int:
    state = sandbox.state
    _seed_repository(sandbox, token)
    number = state.create_issue(
        DEMO_REPO,
        "Add a greeting script",
        "Please add `hello.py` that prints `Hello, world!` when run, with a small function we can reuse.",
        author=DEMO_USER,
    )
    state.add_label(DEMO_REPO, number, "coding agent", actor=DEMO_USER)
    return number


def _print_outcome(sandbox: GitHubSandbox, number: int, workspaces: Path, keep: bool) -> None:
    issue = sandbox.state.issue(DEMO_REPO, number)
    typer.echo("")
    typer.echo(f"Issue {DEMO_REPO}#{number}: {issue.title}")
    typer.echo(f"  labels: {', '.join(issue.labels) or 'none'}")
    for comment in sandbox.state.comments(DEMO_REPO, number):
        typer.echo(f"  --- comment by @{comment.author}")
        for line in strip_marker(comment.body).strip().splitlines():
            typer.echo(f"  | {line}")
    for pull in sandbox.state.pulls(DEMO_REPO):
        files = sandbox.state.git.changed_files(DEMO_REPO, pull.base or "main", pull.head or "")
        typer.echo("")
        typer.echo(f"Pull request {DEMO_REPO}#{pull.number}{' (draft)' if pull.draft else ''}: {pull.title}")
        typer.echo(f"  branch: {pull.head} -> {pull.base}")
        typer.echo(f"  files changed: {', '.join(files) or 'none'}")
        typer.echo(f"  url: {sandbox.url}/{DEMO_REPO}/pull/{pull.number}")
    if keep and workspaces.is_dir():
        typer.echo(f"  the run's workspace (a clone): {', '.join(str(path) for path in sorted(workspaces.iterdir()))}")


def _no_bwrap() -> bool:
    """Whether this machine lacks bubblewrap, so the demo must run its commands unsandboxed."""
    return shutil.which("bwrap") is None


@contextlib.contextmanager
def _demo_directory(keep: Path | None) -> Iterator[Path]:
    """The demo's files: `keep` when given (left in place), else a temp dir removed at the end."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="coding-agent-demo-", ignore_cleanup_errors=True) as name:
        yield Path(name)


def _sandbox_none(command: str, llm: LLMConfig | None, allow_none: bool, replay_note: str) -> bool | None:
    """Whether `command` runs the model's commands unsandboxed, having said so first; None
    when it must refuse (SPEC 15 "Run unsandboxed by accident").

    Without bwrap the replay model may run unsandboxed: it runs only its own scripted
    steps (`replay_note` says so). A model of the operator's (`--llm`) runs whatever an
    issue talks it into, so, like `serve`, only the operator's own `security.sandbox:
    none` (`allow_none`) lets it run without bwrap."""
    if not _no_bwrap():
        return False
    if llm is not None and not allow_none:
        typer.echo(
            f"{command} --llm runs the commands of your model: it needs bubblewrap (bwrap), not found. "
            "Install bubblewrap, or set security.sandbox: none in the config to run them unsandboxed.",
            err=True,
        )
        return None
    if llm is not None:
        typer.echo(
            f"No bubblewrap (bwrap) on this machine: {command} runs the commands of your model unsandboxed, "
            "as your config's security.sandbox: none says."
        )
    else:
        typer.echo(f"No bubblewrap (bwrap) on this machine: {replay_note}")
    return True


def run_demo(
    llm: LLMConfig | None, keep: Path | None, planning: bool = False, allow_none: bool = False, app: bool = False
) -> int:
    """Run the demo (`planning`: in planning mode, SPEC 10); return the process exit code.
    `allow_none`: the config of `--llm` sets `security.sandbox: none`. `app`: the agent
    runs as a GitHub App installed on the demo's repository (SPEC 17), not with a token."""
    sandbox_none = _sandbox_none(
        "demo",
        llm,
        allow_none,
        "the demo runs with security.sandbox: none (commands unsandboxed; it runs only its own scripted task).",
    )
    if sandbox_none is None:
        return 2
    with _demo_directory(keep) as directory:
        return _run_in(directory, llm, keep is not None, sandbox_none, planning, app)


def _model(llm: LLMConfig | None, script: ReplayScript) -> tuple[ReplaySandbox | None, dict[str, Any]]:
    """The `llm` config section: the operator's model (`--llm`), else the replay model
    playing `script`, started here (the caller stops it)."""
    if llm is not None:
        section = llm.model_dump(mode="json", exclude_none=True)
        for name in ("openai", "lmstudio"):
            provider = getattr(llm, name)
            if provider is not None and provider.api_key is not None:
                section[name]["api_key"] = provider.api_key.get_secret_value()
        return None, section
    replay = ReplaySandbox(script).start()
    return replay, {
        "provider": "openai",
        "function_calling": True,
        "openai": {"base_url": replay.openai_base_url, "api_key": "demo-replay-key", "model": "replay-model"},
    }


def _install_app(sandbox: GitHubSandbox) -> dict[str, Any]:
    """A GitHub App installed on the demo's repository, with a key drawn for this run; its
    `github.app` config section. The bot is then `coding-agent-demo[bot]`."""
    private, public = new_key_pair()
    app = sandbox.state.add_app(DEMO_APP, public, owner="demo")
    sandbox.state.install_app(app.id, "demo", [DEMO_REPO])
    return {"app_id": app.id, "private_key": private}


def _run_in(
    directory: Path, llm: LLMConfig | None, keep: bool, sandbox_none: bool, planning: bool, app: bool = False
) -> int:
    token = _bot_token()
    with GitHubSandbox() as forge:
        number = _seed(forge, token)
        replay, llm_section = _model(llm, _demo_script(planning))
        try:
            # An empty environment: forge tokens exported for real work (GITHUB_TOKEN ...)
            # must not replace the sandbox forge's token (SPEC 12).
            data = _config(forge.url, token, llm_section, directory, sandbox_none, planning, keep)
            if app:
                data["github"] = {"api_url": forge.url, "owner": "demo", "app": _install_app(forge)}
            config = parse_config(data, source="demo", env={})
            configure_logging(config.logging, Redactor(config.secrets()), console=True)
            typer.echo(f"Sandbox GitHub at {forge.url}; issue {DEMO_REPO}#{number} labelled 'coding agent' by @{DEMO_USER}.")
            typer.echo("Model: " + ("the replay model (scripted)" if llm is None else f"{llm.provider} {llm.active.model}"))
            typer.echo(f"Files of this demo: {directory}" + ("" if keep else " (removed at the end; --dir DIR keeps them)"))
            report = asyncio.run(_run_once(config))
        finally:
            if replay is not None:
                replay.stop()
        _print_outcome(forge, number, directory / "workspaces", keep)
    ok = bool(report.results) and all(result.status == "done" for result in report.results)
    if not ok:
        where = f" and the log in {directory / 'logs'}" if keep else "; run with --dir DIR to keep the log"
        typer.echo(f"The demo task did not finish as done; see the comments above{where}.", err=True)
    return 0 if ok else 1


def run_playground(
    llm: LLMConfig | None,
    keep: Path | None,
    serve_http: ServeHttp,
    planning: bool = False,
    allow_none: bool = False,
    app: bool = False,
) -> int:
    """`demo --serve` (SPEC 12): the sandbox forge with its page for people, the dashboard
    (served by `serve_http`, the web layer's, which this module sits below) and the agent
    working what is labelled there, until Ctrl-C; return the process exit code.
    `allow_none`: the config of `--llm` sets `security.sandbox: none`. `app`: the agent
    works as a GitHub App installed on the demo repository (`github.app`, no owner: every
    installation's repositories), its bot `coding-agent-demo[bot]`."""
    if planning and llm is None:
        typer.echo("demo --serve --planning needs a model that plans: add --llm (the replay model does not).", err=True)
        return 2
    sandbox_none = _sandbox_none(
        "demo --serve",
        llm,
        allow_none,
        "the playground runs with security.sandbox: none "
        "(commands unsandboxed; the replay model runs only its own scripted steps).",
    )
    if sandbox_none is None:
        return 2
    with _demo_directory(keep) as directory:
        playground = Playground(DEMO_REPO, DEMO_USER, f"{DEMO_APP}[bot]" if app else DEMO_BOT)
        token = _bot_token()
        with GitHubSandbox(playground=playground) as forge:
            _seed_repository(forge, token)
            replay, llm_section = _model(llm, _playground_script())
            try:
                data = _config(forge.url, token, llm_section, directory, sandbox_none, planning, keep is not None)
                if app:
                    data["github"] = {"api_url": forge.url, "app": _install_app(forge)}
                config = parse_config({**data, **_PLAYGROUND_SETTINGS}, source="demo --serve", env={})
                configure_logging(config.logging, Redactor(config.secrets()), console=True)
                logging.getLogger("coding_agent.runtime.producer").addFilter(_quiet_idle_polls)
                kept = "" if keep else " (removed when it ends; --dir DIR keeps them)"
                typer.echo(f"Files of this playground: {directory}{kept}")
                asyncio.run(_serve_playground(config, forge, playground, replay, serve_http))
            except KeyboardInterrupt:  # a second Ctrl-C: end now, still removing what it made
                typer.echo("Interrupted.")
            finally:
                if replay is not None:
                    replay.stop()
    typer.echo(f"Stopped. The playground's files are kept in {directory}." if keep else f"Stopped. Removed {directory}.")
    return 0


# Picked up within a second or two of labelling; an unassign seen at the next step;
# a few issues at once. Never started afresh: the sandbox forge lives in this process.
_PLAYGROUND_SETTINGS: dict[str, Any] = {
    "scheduling": {"interval_seconds": 1, "restart_after_runs": 0},
    "task_stop": {"enabled": True, "check_interval": 1, "min_check_interval_seconds": 0},
    "dashboard": {"enabled": True, "bind": "127.0.0.1:0"},
    "workers": 3,
}


def _quiet_idle_polls(record: logging.LogRecord) -> bool:
    """Drop the log line of a poll that found nothing: the playground polls every second."""
    return not (str(record.msg).startswith("poll: %d pending") and record.args == (0, 0))


def _playground_script() -> ReplayScript:
    text = resources.files("coding_agent.sandbox").joinpath("scripts/playground.yaml").read_text(encoding="utf-8")
    return ReplayScript.from_dict(yaml.safe_load(text))


async def _serve_playground(
    config: AgentConfig, forge: GitHubSandbox, playground: Playground, replay: ReplaySandbox | None, serve_http: ServeHttp
) -> None:
    """Serve until SIGINT/SIGTERM: the first pauses the running tasks at their next step,
    within `scheduling.shutdown_grace_seconds`, and ends the service (a second ends the
    process at once)."""
    service = AgentService(config)
    stop = asyncio.Event()
    shutdown = GracefulShutdown(service, stop, on_second_signal=_interrupted)
    shutdown.install()

    async def serve() -> int:
        async with serve_http(config, service) as dashboard_url:
            playground.dashboard_url = dashboard_url
            typer.echo(f"Sandbox forge page: {forge.playground_url} (open and label issues there, as @{DEMO_USER})")
            typer.echo("  (its key is this run's secret: the page and its API answer only with it; keep it to yourself)")
            typer.echo(f"Dashboard: {dashboard_url or 'not served (see the log)'}")
            model = (
                f"the replay model (scripted) at {replay.url}" if replay else f"{config.llm.provider} {config.llm.active.model}"
            )
            typer.echo(f"Model: {model}")
            typer.echo("Ctrl-C ends it.")
            await service.serve(stop)
        return 0

    try:
        await shutdown.guard(serve())
    finally:
        await shutdown.close()


def _interrupted(signum: int) -> None:
    """A second signal ends the playground at once, still removing what it made."""
    raise KeyboardInterrupt


async def _run_once(config: Any) -> Any:
    service = AgentService(config)
    try:
        return await service.run_cycle()
    finally:
        await service.aclose()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_demo(None, None))
