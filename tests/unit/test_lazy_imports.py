"""Start-up cost (issue 13 item 4): what importing the config and the CLI must not pull in.

Every CLI command and every agent process imports the config; the heavy libraries
(sqlalchemy, the LLM SDKs, the MCP SDK) are imported where they are used, so that
`coding-agent --help` or a config check does not pay for them. Checked in a fresh
interpreter, where `sys.modules` shows exactly what an import brought in.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("sqlalchemy", "alembic", "openai", "ollama", "mcp", "githubkit", "gitlab")


def _loaded_after(statement: str) -> set[str]:
    probe = f"import sys\n{statement}\nprint(' '.join(sorted({{name.split('.')[0] for name in sys.modules}})))"
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(completed.stdout.split())


@pytest.mark.parametrize("module", ["coding_agent.config", "coding_agent.cli"])
def test_importing_leaves_the_heavy_libraries_out(module: str) -> None:
    loaded = _loaded_after(f"import {module}")
    assert "coding_agent" in loaded  # the probe really imported it
    assert sorted(loaded & set(HEAVY)) == []


def test_a_run_imports_only_the_configured_models_sdk() -> None:
    loaded = _loaded_after("import coding_agent.llm.factory")
    assert "openai" not in loaded and "ollama" not in loaded


def test_a_poll_imports_the_mcp_sdk_only_when_a_run_starts_its_tools() -> None:
    """`run --once` from cron mostly finds nothing to do: the service, its runner and the
    preflight load without the MCP SDK (about a second of CPU); a run imports it as it
    starts the task's tools, and `doctor` in its MCP server check."""
    loaded = _loaded_after("import coding_agent.cli.serving, coding_agent.runtime.service, coding_agent.runtime.checks")
    assert "coding_agent" in loaded
    assert "mcp" not in loaded


def test_the_schema_head_known_without_alembic_is_alembic_s_head() -> None:
    """`schema.HEAD` lets a migrated store open without loading Alembic; a new migration
    that does not move it would leave databases unmigrated."""
    from coding_agent.runtime.schema import HEAD, head_version

    assert HEAD == head_version()


def test_opening_a_migrated_store_leaves_alembic_out(tmp_path: Path) -> None:
    """Alembic (with Mako and Pygments) is imported to migrate, not by every process that
    opens a store already at the newest revision (each `run --once`, `status`, `memory`)."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    opening = f"from coding_agent.runtime.state_store import StateStore\nStateStore({url!r}).runs()"
    assert "alembic" in _loaded_after(opening), "the first opening migrates a fresh database"
    loaded = _loaded_after(opening)
    assert "coding_agent" in loaded and "sqlalchemy" in loaded
    assert "alembic" not in loaded and "mako" not in loaded
