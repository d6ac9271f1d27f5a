"""`coding-agent doctor`, the preflight of `run --once`, and the commands that read only
the local state (SPEC 11), against the sandbox forges and the replay model."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from coding_agent.sandbox.replay_model import ReplaySandbox

from ._steering import spawn_cli
from .conftest import (
    BOT,
    SECRETS,
    AgentSetup,
    ForgeUnderTest,
    GitHubForge,
    llm_section,
    run_cli,
    write_config,
)

# The first reply answers doctor's model probe with the structured tool call it asks for.
REPLAY_MODEL = {"replies": [{"tool": "doctor/echo", "args": {"text": "ping"}}, {"done": "nothing to do"}], "model": "replay"}


def _lines(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """doctor's lines by check name: {'forge github http://...': 'ok  ...'}."""
    lines = {}
    for line in result.stdout.splitlines():
        status, _, rest = line.partition("  ")
        name = rest.strip().split(": ", 1)[0]
        lines[name] = status.strip() + " " + rest.strip()
    return lines


def _assert_no_secret(result: subprocess.CompletedProcess[str], *extra: str) -> None:
    for secret in (*SECRETS, *extra):
        assert secret not in result.stdout + result.stderr


def test_doctor_all_good_one_line_per_check(forge: ForgeUnderTest, tmp_path: Path) -> None:
    with ReplaySandbox(REPLAY_MODEL) as model:
        setup = write_config(tmp_path, [forge], llm_section(model))
        result = run_cli(setup, "doctor")
    lines = _lines(result)
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(line.startswith("ok ") for line in lines.values()), result.stdout
    names = list(lines)
    assert names[0] == "config"
    assert f"forge {forge.name} {forge.url}" in names
    assert f"@{BOT}" in lines[f"forge {forge.name} {forge.url}"]
    assert any(name.startswith("llm openai") for name in names)
    assert "mcp server workspace" in names and "workspace" in names[names.index("mcp server workspace")]
    assert "view" in lines["mcp server workspace"]
    assert {"sandbox", "database", "queue"} <= set(names)
    assert lines["setup and egress"].endswith("security.egress.run_hosts: none (no network)"), lines
    _assert_no_secret(result)


def test_doctor_reports_the_bot_role_on_listed_repositories(github_forge: GitHubForge, tmp_path: Path) -> None:
    github_forge.sandbox.state.add_repo("acme/readonly")
    github_forge.sandbox.state.set_permission("acme/readonly", BOT, "read")
    with ReplaySandbox(REPLAY_MODEL) as model:
        section = {**github_forge.config_section(), "repos": ["widgets", "readonly"]}
        setup = write_config(tmp_path, [github_forge], llm_section(model), github=section)
        result = run_cli(setup, "doctor")
    forge_line = _lines(result)[f"forge github {github_forge.url}"]
    assert result.returncode == 1
    assert forge_line.startswith("FAIL") and "acme/widgets: write" in forge_line
    assert "acme/readonly: read (needs write)" in forge_line


def test_doctor_bad_token_dead_llm_missing_model_broken_server(github_forge: GitHubForge, tmp_path: Path) -> None:
    llm_key = "sk-" + secrets.token_hex(16)
    forge_token = "ghp_" + secrets.token_hex(16)
    data: dict[str, Any] = {
        "task_source": "github",
        "github": {"api_url": github_forge.url, "token": forge_token, "owner": "acme", "bot_name": BOT},
        "llm": {"provider": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": llm_key}},
        "mcp_servers": [{"mcp_server_name": "broken", "command": [sys.executable, "-c", "raise SystemExit(3)"]}],
        "database": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
        "logging": {"dir": str(tmp_path / "logs")},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    result = subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "doctor", "--config", str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "OPENAI_API_KEY")},
    )
    lines = _lines(result)
    assert result.returncode == 1
    assert lines[f"forge github {github_forge.url}"].startswith("FAIL") and "401" in lines[f"forge github {github_forge.url}"]
    assert lines["llm openai http://127.0.0.1:9/v1"].startswith("FAIL")
    assert lines["mcp server broken"].startswith("FAIL")
    assert lines["database"].startswith("ok")
    _assert_no_secret(result, llm_key, forge_token)


def test_doctor_ollama_reports_num_ctx_and_a_missing_model(github_forge: GitHubForge, tmp_path: Path) -> None:
    with ReplaySandbox(REPLAY_MODEL) as model:
        setup = write_config(tmp_path, [github_forge], llm_section(model, provider="ollama"))
        good = _lines(run_cli(setup, "doctor"))
        section = llm_section(model, provider="ollama")
        section["ollama"]["model"] = "not-pulled"
        setup = write_config(tmp_path, [github_forge], section)
        bad = _lines(run_cli(setup, "doctor"))
    [good_llm] = [line for name, line in good.items() if name.startswith("llm ollama")]
    assert good_llm.startswith("ok") and "num_ctx sent 8192" in good_llm and "supports 131072" in good_llm
    [bad_llm] = [line for name, line in bad.items() if name.startswith("llm ollama")]
    assert bad_llm.startswith("FAIL") and "ollama pull not-pulled" in bad_llm


def test_preflight_with_the_llm_down_claims_nothing_and_posts_nothing(forge: ForgeUnderTest, tmp_path: Path) -> None:
    number = forge.open_task("issue", "Greet people", "Please add hello.txt.")
    before_labels, before_comments = forge.labels("issue", number), forge.comments("issue", number)
    llm = {"provider": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key": "${E2E_LLM_KEY}"}}
    setup = write_config(tmp_path, [forge], llm)
    result = run_cli(setup, "run", "--once")
    assert result.returncode == 1
    assert "preflight failed: llm openai http://127.0.0.1:9/v1" in result.stderr
    assert forge.labels("issue", number) == before_labels
    assert forge.comments("issue", number) == before_comments
    _assert_no_secret(result)


def test_preflight_with_a_refused_forge_token_exits_1_with_one_line(github_forge: GitHubForge, tmp_path: Path) -> None:
    with ReplaySandbox(REPLAY_MODEL) as model:
        section = {**github_forge.config_section(), "token": "ghp_" + secrets.token_hex(12)}
        setup = write_config(tmp_path, [github_forge], llm_section(model), github=section)
        result = run_cli(setup, "run", "--once")
        assert not model.requests, "the preflight lists models, it never chats"
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("coding-agent: preflight failed: forge github") and "401" in line


def test_local_commands_need_no_forge_token(github_forge: GitHubForge, tmp_path: Path) -> None:
    setup = write_config(tmp_path, [github_forge], {"provider": "openai", "openai": {"model": "m", "api_key": "${NOT_SET_ANYWHERE}"}})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2E_", "GITHUB_", "OPENAI_"))}
    for args in (["status"], ["memory", "list"], ["pause"], ["resume", "--queue"]):
        result = subprocess.run(
            [sys.executable, "-m", "coding_agent.cli", *args, "--config", str(setup.config_path)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, (args, result.stderr)
    # A command that talks to the forge still names the missing variable.
    result = subprocess.run(
        [sys.executable, "-m", "coding_agent.cli", "run", "--once", "--config", str(setup.config_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "is not set" in result.stderr



def _sigterm_after_failed_preflight(setup: AgentSetup, role: str) -> tuple[int, str, str]:
    """Start `coding-agent <role>`, wait until it logs that its preflight failed, send
    SIGTERM: (exit code, stderr, the log)."""
    import signal

    from tests.support.waiting import wait_for

    process = spawn_cli(setup.config_path, role)
    log_file = setup.logs / "coding-agent.log"
    try:
        wait_for(
            lambda: log_file.exists() and "nothing is claimed until this passes" in log_file.read_text(),
            60,
            f"{role} to log the failed preflight",
        )
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, err, log_file.read_text()


def test_serve_with_the_llm_down_waits_logs_and_claims_nothing(github_forge: GitHubForge, tmp_path: Path) -> None:
    number = github_forge.open_task("issue", "Greet people", "Please add hello.txt.")
    llm = {"provider": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}
    setup = write_config(
        tmp_path, [github_forge], llm, scheduling={"interval_seconds": 0.2}, dashboard={"bind": "127.0.0.1:0"}
    )
    code, err, log = _sigterm_after_failed_preflight(setup, "serve")
    assert code == 0, err
    assert "preflight: llm openai http://127.0.0.1:9/v1" in log
    assert github_forge.labels("issue", number) == ["coding agent"]
    assert github_forge.comments("issue", number) == []


def test_worker_with_the_llm_down_waits_logs_and_takes_nothing_from_the_queue(
    github_forge: GitHubForge, tmp_path: Path
) -> None:
    """`worker` runs the same preflight as `serve`: a queued task stays queued (the
    message is not consumed), no label changes, no comment, until the LLM answers."""
    import asyncio
    import uuid

    import pytest

    from coding_agent.config import load_config
    from coding_agent.runtime.service import AgentService
    from tests.support.services import amqp_url, reachable

    from .conftest import secret_env

    if not reachable(amqp_url()):
        pytest.skip("RabbitMQ is needed (127.0.0.1:5672)")
    name = f"coding-agent.test.{uuid.uuid4().hex[:10]}"
    number = github_forge.open_task("issue", "Greet people", "Please add hello.txt.")
    llm = {"provider": "openai", "openai": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}}
    setup = write_config(tmp_path, [github_forge], llm, queue={"backend": "rabbitmq", "url": amqp_url(), "name": name})

    async def produce_once() -> int:
        service = AgentService(load_config(setup.config_path, env={**os.environ, **secret_env()}))
        try:
            return len((await service.producer.cycle(await service.queue())).enqueued)
        finally:
            await service.aclose()

    async def queued() -> int:
        import aio_pika

        connection = await aio_pika.connect_robust(amqp_url())
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(name, passive=True)
            count = queue.declaration_result.message_count or 0
            return count

    async def delete_queues() -> None:
        import aio_pika

        connection = await aio_pika.connect_robust(amqp_url())
        async with connection:
            channel = await connection.channel()
            for queue in (name, f"{name}.dead"):
                await channel.queue_delete(queue)

    try:
        assert asyncio.run(produce_once()) == 1
        labels_before = github_forge.labels("issue", number)
        code, err, log = _sigterm_after_failed_preflight(setup, "worker")
        assert code == 0, err
        assert "preflight: llm openai http://127.0.0.1:9/v1" in log
        assert asyncio.run(queued()) == 1, "the queued task is still waiting for a worker"
        assert github_forge.labels("issue", number) == labels_before
        assert github_forge.comments("issue", number) == []
    finally:
        asyncio.run(delete_queues())


def test_doctor_names_the_gitlab_tokens_kind_and_warns_before_it_expires(gitlab_forge: ForgeUnderTest, tmp_path: Path) -> None:
    """SPEC 17: the token's kind and expiry (`GET /personal_access_tokens/self`), a warning
    14 days ahead, a failure once it has expired."""
    import datetime as dt

    from .conftest import GITLAB_BOT_TOKEN

    state: Any = gitlab_forge.sandbox.state  # type: ignore[attr-defined]
    today = dt.datetime.now(dt.timezone.utc).date()
    name = f"forge gitlab {gitlab_forge.url}"
    with ReplaySandbox(REPLAY_MODEL) as model:
        setup = write_config(tmp_path, [gitlab_forge], llm_section(model))
        seen = {}
        for days in (90, 10, -1):
            state.set_token_expiry(GITLAB_BOT_TOKEN, (today + dt.timedelta(days=days)).isoformat())
            seen[days] = _lines(run_cli(setup, "doctor"))[name]
    assert seen[90].startswith("ok ") and "personal access token" in seen[90] and "warning" not in seen[90]
    assert seen[10].startswith("ok ") and "warning: the token expires" in seen[10] and "in 10 day(s)" in seen[10]
    assert seen[-1].startswith("FAIL") and "the token expired" in seen[-1]
