"""The versioned schema (issue 10 item 6): a database created by the previous version,
which had no schema version, is migrated when the agent starts, keeps its rows, and the
agent works a task on it; on SQLite and on PostgreSQL. So is one at revision 0002 (before
webhook nudges, issue 13), with an operator request pending and a follow-up decided."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from alembic import command
from sqlalchemy import create_engine, inspect, text

from coding_agent.runtime.service import AgentService, CycleReport
from coding_agent.sandbox.replay_model import ReplaySandbox
from coding_agent.store.followups import FollowUpRecords
from coding_agent.store.schema import _config, head_version, schema_version
from coding_agent.store.state import StateStore

from ..postgres import fresh_postgres_or_skip
from .conftest import HELLO_SCRIPT, GitHubForge, load_for_service, write_config, llm_section

# The schema as the unversioned state store created it (main before the schema had a
# version: StateStore + FollowUpRecords + MemoryStore, `metadata.create_all`), dumped
# from SQLite. PostgreSQL got the same with SERIAL for the integer keys.
PREVIOUS_SCHEMA = """
CREATE TABLE runs (
    uuid VARCHAR(36) NOT NULL, task_key VARCHAR(300) NOT NULL, status VARCHAR(20) NOT NULL,
    owner VARCHAR(100) NOT NULL, started_at FLOAT NOT NULL, finished_at FLOAT,
    steps INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
    requester VARCHAR(200), error TEXT, PRIMARY KEY (uuid));
CREATE INDEX ix_runs_task_key ON runs (task_key);
CREATE TABLE leases (
    task_key VARCHAR(300) NOT NULL, owner VARCHAR(100) NOT NULL, expires_at FLOAT NOT NULL,
    PRIMARY KEY (task_key));
CREATE TABLE token_usage (
    id INTEGER NOT NULL, run_uuid VARCHAR(36) NOT NULL, task_key VARCHAR(300) NOT NULL,
    prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, recorded_at FLOAT NOT NULL,
    PRIMARY KEY (id));
CREATE INDEX ix_token_usage_task_key ON token_usage (task_key);
CREATE INDEX ix_token_usage_run_uuid ON token_usage (run_uuid);
CREATE TABLE run_requests (
    task_key VARCHAR(300) NOT NULL, kind VARCHAR(10) NOT NULL, requested_at FLOAT NOT NULL,
    PRIMARY KEY (task_key));
CREATE TABLE run_marks (
    run_uuid VARCHAR(36) NOT NULL, progress_comment_id VARCHAR(100), resume_hold BOOLEAN NOT NULL,
    final_status VARCHAR(20), final_body TEXT, final_posted BOOLEAN NOT NULL, PRIMARY KEY (run_uuid));
CREATE TABLE trigger_rejections (
    task_key VARCHAR(300) NOT NULL, updated_at VARCHAR(40) NOT NULL, PRIMARY KEY (task_key));
CREATE TABLE followup_comments (
    task_key VARCHAR(300) NOT NULL, comment_id VARCHAR(100) NOT NULL, action VARCHAR(20) NOT NULL,
    at FLOAT NOT NULL, PRIMARY KEY (task_key, comment_id));
CREATE TABLE followup_seen (
    task_key VARCHAR(300) NOT NULL, updated_at VARCHAR(40) NOT NULL, PRIMARY KEY (task_key));
CREATE TABLE channel_memories (
    channel_id VARCHAR(300) NOT NULL, workspace_id VARCHAR(300) NOT NULL, channel_name VARCHAR(300) NOT NULL,
    long_term TEXT, short_term TEXT, updated_at FLOAT, last_active_at FLOAT NOT NULL, PRIMARY KEY (channel_id));
CREATE INDEX ix_channel_memories_workspace_id ON channel_memories (workspace_id);
CREATE TABLE thread_memories (
    id INTEGER NOT NULL, channel_id VARCHAR(300) NOT NULL, thread_id VARCHAR(300) NOT NULL,
    run_uuid VARCHAR(36) NOT NULL, summary TEXT NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY (id));
CREATE INDEX ix_thread_memories_channel_id ON thread_memories (channel_id);
CREATE INDEX ix_thread_memories_created_at ON thread_memories (created_at);
CREATE INDEX ix_thread_memories_thread_id ON thread_memories (thread_id);
INSERT INTO runs VALUES ('old-run', 'github:acme/widgets#99', 'done', 'old-worker', 1.0, 2.0, 3, 10, 5, 'alice', NULL);
INSERT INTO token_usage (run_uuid, task_key, prompt_tokens, completion_tokens, recorded_at)
    VALUES ('old-run', 'github:acme/widgets#99', 10, 5, 1.5);
"""


def _create_previous(url: str) -> None:
    engine = create_engine(url)
    ddl = PREVIOUS_SCHEMA
    if engine.dialect.name == "postgresql":
        ddl = ddl.replace("id INTEGER NOT NULL", "id SERIAL NOT NULL")
    with engine.begin() as connection:
        for statement in filter(str.strip, ddl.split(";")):
            connection.execute(text(statement))
    engine.dispose()


def _work_one_task(forge: GitHubForge, directory: Path, url: str) -> CycleReport:
    number = forge.open_task("issue", "Add a greeting file", "Please add hello.txt.")
    assert number
    with ReplaySandbox(HELLO_SCRIPT) as model:
        setup = write_config(directory, [forge], llm_section(model), database={"url": url})

        async def once() -> CycleReport:
            service = AgentService(load_for_service(setup))
            try:
                return await service.run_cycle()
            finally:
                await service.aclose()

        return asyncio.run(once())


def _check_upgraded(url: str, report: CycleReport) -> None:
    assert [result.status for result in report.results] == ["done"]
    engine = create_engine(url)
    try:
        assert schema_version(engine) == head_version()
        assert {"queue_entries", "webhook_deliveries", "run_nudges", "task_facts"} <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    store = StateStore(url)
    try:
        runs = {run.uuid: run for run in store.runs.all()}
        assert runs["old-run"].status == "done" and runs["old-run"].steps == 3, "the old rows are kept"
        assert [run.status for uuid, run in runs.items() if uuid != "old-run"] == ["done"]
        assert store.runs.token_totals()["github:acme/widgets#99"] == (10, 5)
        worked = next(run.task_key for uuid, run in runs.items() if uuid != "old-run")
        fact = store.tasks.task_facts()[worked]  # what the dashboard names it by, and its PR
        assert fact.title == "Add a greeting file" and fact.url and fact.change_url and "/pull/" in fact.change_url
        assert {run.uuid for run in store.runs.latest_runs()} == set(runs)
    finally:
        store.close()


def test_a_previous_sqlite_database_is_migrated_and_worked_on(github_forge: GitHubForge, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    _create_previous(url)
    engine = create_engine(url)
    assert schema_version(engine) is None, "the previous version kept no schema version"
    engine.dispose()
    _check_upgraded(url, _work_one_task(github_forge, tmp_path, url))


def test_a_previous_postgres_database_is_migrated_and_worked_on(github_forge: GitHubForge, tmp_path: Path) -> None:
    with fresh_postgres_or_skip() as url:
        _create_previous(url)
        _check_upgraded(url, _work_one_task(github_forge, tmp_path, url))


def _create_at_0002(url: str) -> None:
    """The schema as the agent left it at revision 0002, with a run and a pending pause."""
    engine = create_engine(url)
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0002")
        connection.execute(
            text("INSERT INTO runs VALUES ('old-run', 'github:acme/widgets#99', 'done', 'w', 1.0, 2.0, 3, 10, 5, NULL, NULL)")
        )
        connection.execute(text("INSERT INTO run_requests VALUES ('github:acme/widgets#99', 'pause', 1.0)"))
        connection.execute(text("INSERT INTO followup_comments VALUES ('github:acme/widgets#99', '7', 'run', 2.0)"))
    assert schema_version(engine) == "0002"
    engine.dispose()


def _check_nudges_added(url: str) -> None:
    store = StateStore(url)
    try:
        assert store.steering.steering_requests("github:acme/widgets#99") == ("pause", None), "the pending request is kept"
        store.steering.nudge_run("github:acme/widgets#99")
        assert store.steering.steering_requests("github:acme/widgets#99")[1] is not None
        assert [run.uuid for run in store.runs.all()] == ["old-run"]
        assert schema_version(store.engine) == head_version()
        records = FollowUpRecords(store.engine)
        assert records.handled("github:acme/widgets#99", "7") == ("run", 2.0), "the decision is kept"
        assert records.run_decided_after("github:acme/widgets#99", 0.0) is None, "it names no run to take over"
    finally:
        store.close()


def test_a_sqlite_database_at_0002_gains_webhook_nudges(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    _create_at_0002(url)
    _check_nudges_added(url)


def test_a_postgres_database_at_0002_gains_webhook_nudges() -> None:
    with fresh_postgres_or_skip() as url:
        _create_at_0002(url)
        _check_nudges_added(url)


def test_processes_starting_together_migrate_a_fresh_database_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    program = (
        "import sys; from sqlalchemy import create_engine; "
        "from coding_agent.store.schema import migrate; migrate(create_engine(sys.argv[1]))"
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", program, url], stderr=subprocess.PIPE, text=True) for _ in range(4)
    ]
    errors = [process.communicate(timeout=120)[1] for process in processes]
    assert [process.returncode for process in processes] == [0] * 4, errors
    engine = create_engine(url)
    with engine.connect() as connection:
        versions = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    engine.dispose()
    assert versions == [head_version()], "one version row"
