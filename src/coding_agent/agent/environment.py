"""A run's environment (SPEC 7.1): the egress proxy, the setup, and who tried what.

The runner opens one `RunEnvironment` around the MCP servers: it starts the run's
egress proxy (its own Unix socket), runs the setup with the setup allow-list, switches
the proxy to the `run` allow-list, hands the socket to the built-in workspace server,
and names the command behind each refused request, so the PR body can say
"blocked: host, by command". Everything here is best effort for the run: a setup that
cannot even start is reported to the model like a failed one.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import TracebackType
from typing import Any

from coding_agent.agent.loop import ToolRunner
from coding_agent.agent.trust import head_is_trusted
from coding_agent.config import AgentConfig, MCPServerConfig, WorkspaceServerConfig
from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source
from coding_agent.tools.egress_proxy import EgressProxy, blocked_lines
from coding_agent.tools.egress_sandbox import EgressSandbox, forwarder_problem, no_proxy_value
from coding_agent.tools.sandbox import SandboxUnavailable
from coding_agent.tools.types import ToolResult
from coding_agent.workspace.env_setup import REPOSITORY_SCRIPT, SetupOutcome, plan_setup, run_setup
from coding_agent.workspace.git import Git
from coding_agent.workspace.setup_cache import CacheScope

__all__ = ["RunEnvironment", "describe_egress"]

log = logging.getLogger(__name__)


def describe_egress(config: AgentConfig) -> list[str]:
    """Lines for `coding-agent doctor`: where the setup comes from and what the sandbox may reach."""
    setup, egress = config.setup, config.security.egress

    def source(commands: list[str] | None, from_repository: bool | None) -> str:
        if from_repository:
            return f"{REPOSITORY_SCRIPT} from each repository's default branch"
        return f"{len(commands)} command(s) from the config" if commands else "none"

    lines = [
        f"setup: {source(setup.commands, setup.from_repository)}; limit {setup.timeout_seconds:g}s; "
        + (f"cache in {setup.cache_dir}" if setup.cache else "no cache")
    ]
    for project, override in sorted(setup.repositories.items()):
        commands = override.commands if override.commands is not None else setup.commands
        chosen = override.from_repository if override.from_repository is not None else setup.from_repository
        lines.append(f"setup for {project}: {source(commands, chosen)}")
    for name, hosts in (("setup_hosts", egress.setup_hosts), ("run_hosts", egress.run_hosts)):
        shown = ", ".join(hosts) if hosts else "none (no network)"
        lines.append(f"security.egress.{name}: {shown}")
    problem = forwarder_problem()
    if (egress.setup_hosts or egress.run_hosts) and problem is not None:
        lines.append(f"forwarder: {problem}")
    return lines


class _AttributedTools:
    """Names the running command on the proxy while a `run` tool call is in flight."""

    def __init__(self, inner: ToolRunner, proxy: EgressProxy) -> None:
        self._inner = inner
        self._proxy = proxy

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        command = args.get("command") if isinstance(args, dict) else None
        self._proxy.command = command if name.endswith("/run") and isinstance(command, str) else name
        try:
            return await self._inner.call(name, args)
        finally:
            self._proxy.command = "(no tool running)"


class RunEnvironment:
    """`async with RunEnvironment(...) as environment:` around the MCP servers; entering runs the setup."""

    def __init__(
        self,
        config: AgentConfig,
        source: Source,
        task: Task,
        workspace: Path,
        redactor: Redactor,
        writers: frozenset[str] = frozenset(),
    ) -> None:
        """`writers`: who the claim of this run found to have write access (`Claim.writers`)."""
        egress = config.security.egress
        self._writers = writers
        self._config = config
        self._source = source
        self._task = task
        self._workspace = workspace
        self._redactor = redactor
        self.proxy = EgressProxy(egress.setup_hosts, egress.run_hosts)
        self._no_proxy = no_proxy_value([*egress.setup_hosts, *egress.run_hosts])
        self.setup: SetupOutcome | None = None

    async def __aenter__(self) -> RunEnvironment:
        await self.proxy.start()
        try:
            await self.run_setup()
        except BaseException:
            await self.proxy.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.proxy.close()

    @property
    def sandbox(self) -> EgressSandbox:
        return EgressSandbox(self.proxy.socket_path, self._no_proxy)

    async def run_setup(self) -> SetupOutcome | None:
        """Run the repository's setup (if any) with the setup allow-list; then switch to `run`."""
        project = self._task.key.project
        settings = self._config.setup
        self.proxy.phase, self.proxy.command = "setup", "environment setup"
        try:
            plan = await plan_setup(settings, self._source, project)
            if plan is not None:
                git = Git(timeout=self._config.workspace.git_timeout_seconds, redact=self._redactor.text)
                mode = self._config.security.sandbox
                scope = await self._cache_scope() if plan.cache else None
                self.setup = await run_setup(
                    plan, project, self._workspace, self._config, self.sandbox, git, mode, scope=scope
                )
        except (AgentError, SandboxUnavailable) as error:
            message = self._redactor.text(str(error))
            log.warning("%s: setup could not start: %s", self._task.key, message)
            self.setup = SetupOutcome("the configured setup", None, False, "", False, 0.0, error=message)
        finally:
            self.proxy.phase, self.proxy.command = "run", "(no tool running)"
        return self.setup

    async def _cache_scope(self) -> CacheScope | None:
        """The setup cache's view of this run (SPEC 15); None (no cache) when the forge cannot say."""
        try:
            repository = await self._source.repository_id(self._task.key.project)
        except AgentError as error:
            log.warning("%s: setup cache not used: %s", self._task.key, self._redactor.text(str(error)))
            return None
        return CacheScope(repository, await head_is_trusted(self._source, self._task, self._writers))

    def servers(self, servers: list[MCPServerConfig]) -> list[MCPServerConfig]:
        """The MCP server configs with the proxy's socket handed to the built-in workspace server."""
        extra = self.sandbox.server_env()
        return [
            server.model_copy(update={"env": {**server.env, **extra}})
            if isinstance(server, WorkspaceServerConfig)
            else server
            for server in servers
        ]

    def tools(self, inner: ToolRunner) -> ToolRunner:
        return _AttributedTools(inner, self.proxy)

    def first_turn_note(self) -> str:
        """Setup result and network access, appended to the model's first turn."""
        parts = []
        if self.setup is not None:
            timeout = self._config.setup.timeout_seconds
            parts.append(self._redactor.text(self.setup.first_turn_note(timeout)))
        hosts = self._config.security.egress.run_hosts
        if hosts:
            listed = ", ".join(f"`{host}`" for host in hosts)
            parts.append(f"## Network\n`run` commands reach only these hosts, through a proxy: {listed}.")
        return "\n\n".join(parts)

    def progress_note(self) -> str | None:
        if self.setup is None:
            return None
        return self.setup.progress_note(self._config.setup.timeout_seconds)

    def blocked_section(self) -> str:
        """The PR body's list of refused requests (empty when none)."""
        lines = blocked_lines(self.proxy.refusals)
        if not lines:
            return ""
        shown = "\n".join(f"- {self._redactor.text(line)}" for line in lines[:50])
        more = f"\n- ... and {len(lines) - 50} more" if len(lines) > 50 else ""
        return f"**Network requests refused by the egress proxy:**\n{shown}{more}"
