"""The operator's commands on tasks: `status`, `pause`, `resume`, `stop` (the same code
as the dashboard's buttons: `runtime/operator_actions.py`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from coding_agent.cli.common import ConfigOption, TaskArgument, exit_with, fail, load, task_key
from coding_agent.cli.serving import continue_runs
from coding_agent.config import AgentConfig


def status(config: ConfigOption = None) -> None:
    """List the tasks (waiting ones first) with their title, requester, state, steps and
    tokens, then token use per requester and per repository with totals, and with daily
    budgets configured, today's use and what is left per requester and repository."""
    from coding_agent.redaction import Redactor
    from coding_agent.runtime.budgets import Budgets
    from coding_agent.store.state import StateStore
    from coding_agent.web.views import task_list, usage

    settings = load(config, local=True)
    store = StateStore(settings.database.url)
    try:
        redactor = Redactor(settings.secrets())
        rows = task_list(store, redactor)
        totals = usage(store)
        budgets = Budgets(settings, store.spend, redactor)
        today = budgets.usage() if budgets.enabled else None
    finally:
        store.close()
    if rows:
        _echo_tasks(rows, totals)
    else:
        typer.echo("no runs recorded")
    if today is not None:
        _echo_budgets(today)


def _echo_tasks(rows: list[dict[str, Any]], totals: dict[str, Any]) -> None:
    for row in rows:
        for line in _status_lines(row):
            typer.echo(line)
    for title, table in (("requester", totals["requesters"]), ("repository", totals["repositories"])):
        typer.echo(f"\ntokens per {title}:")
        for name, entry in table.items():
            typer.echo(f"  {_printable(name):<30} tokens={entry['tokens']:<10} runs={entry['runs']}")
    total = totals["total"]
    typer.echo(f"\ntotal: tokens={total['tokens']} ({total['prompt_tokens']}+{total['completion_tokens']}) runs={total['runs']}")


def _printable(text: str) -> str:
    """Forge text on one terminal line: no control characters (an escape sequence in a
    title must not drive the operator's terminal)."""
    return "".join(char if char.isprintable() else " " for char in text)


def _status_lines(row: dict[str, Any]) -> list[str]:
    place = f" #{row['queue_position']} in queue" if row["queue_position"] else ""
    first = (
        f"{row['task']}  {row['state']:<8}{place} requester={row['requester'] or '-'} steps={row['steps']:<3} "
        f"tokens={row['prompt_tokens']}+{row['completion_tokens']}" + (f"  run={row['run']}" if row["run"] else "")
    )
    lines = [first]
    if row["title"]:
        lines.append(f"    {_printable(row['title'])[:120]}")
    if row["change_url"] and row["kind"] == "issue":
        lines.append(f"    PR/MR: {row['change_url']}")
    if row["reason"]:
        lines.append(f"    reason: {_printable(row['reason'])}")
    if row["ci"]:
        lines.append(f"    CI: {row['ci']}")
    return lines


def _echo_budgets(today: dict[str, Any]) -> None:
    """One line per requester and repository: each daily budget's use, limit and what is left."""
    typer.echo(f"daily budgets (UTC day; resets at {today['resets_at']}):")
    for kind, names in (("requester", today["requesters"]), ("repository", today["repositories"])):
        for name, budgets in names.items():
            parts = [
                f"{budget}={entry['used']}/{entry['limit'] if entry['limit'] is not None else 'unlimited'}"
                + (f" ({entry['left']} left)" if entry["left"] is not None else "")
                for budget, entry in budgets.items()
            ]
            typer.echo(f"  {kind} {name}: {'  '.join(parts)}")


def pause(task: TaskArgument = None, config: ConfigOption = None) -> None:
    """Pause TASK at its next step, or every task (the pause signal file) without TASK.

    A paused TASK waits for `coding-agent resume TASK`. While the signal file exists,
    running tasks pause and none starts; they resume once it is removed.
    """
    from coding_agent.agent.steering import pause_signal_path

    settings = load(config, local=True)
    if not settings.pause_resume.enabled:
        raise fail("pause_resume.enabled is false in the configuration", 2)
    if task is None:
        path = pause_signal_path(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        typer.echo(f"pause signal set ({path}): running tasks pause at their next step")
        return
    _act(settings, task_key(task), "pause")


def _act(settings: AgentConfig, key: str, action: Literal["pause", "stop"]) -> None:
    """pause/stop TASK through the same code as the dashboard; continue a stopped paused run."""
    from coding_agent.runtime.operator_actions import UnknownTask, apply_action
    from coding_agent.store.state import StateStore

    store = StateStore(settings.database.url)
    try:
        result = apply_action(store, key, action)
    except UnknownTask as error:
        raise fail(str(error), 1) from None
    finally:
        store.close()
    typer.echo(result.message)
    if result.continue_now:
        exit_with(settings, continue_runs(settings, {key}))


def resume(
    task: TaskArgument = None,
    queue: Annotated[
        bool, typer.Option("--queue", help="Only lift the pause; a running `serve` or the next `run --once` continues.")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Lift the pause of TASK (or of everything), then continue paused runs from their next step.

    Without TASK the pause signal file is removed too. With --queue the runs are left to
    a running `serve` or the next `run --once`.
    """
    from coding_agent.agent.steering import pause_signal_path
    from coding_agent.store.state import StateStore

    settings = load(config, local=queue)
    path = pause_signal_path(settings)
    key = task_key(task) if task is not None else None
    store = StateStore(settings.database.url)
    try:
        if key is None and path.exists():
            path.unlink()
            typer.echo(f"pause signal removed ({path})")
        store.steering.release_holds(key)
        paused = store.runs.runs_with_status("paused", key)
    finally:
        store.close()
    if key is not None and not paused:
        typer.echo(_resume_watch(settings, key))
    if key is not None and path.exists():
        typer.echo(f"note: the pause signal {path} is present; nothing resumes until it is removed")
    if not queue:
        exit_with(settings, continue_runs(settings, {key} if key else None))


def _resume_watch(settings: AgentConfig, key: str) -> str:
    """TASK has no paused run: lift the pause of its CI watch, through the dashboard's code."""
    from coding_agent.runtime.operator_actions import UnknownTask, apply_action
    from coding_agent.store.state import StateStore

    store = StateStore(settings.database.url)
    try:
        return apply_action(store, key, "resume").message
    except UnknownTask as error:
        return str(error)
    finally:
        store.close()


def stop(task: Annotated[str, typer.Argument(help="The task key to stop.")], config: ConfigOption = None) -> None:
    """Stop TASK for good, as unassigning the bot does (stop comment, stopped label).

    A running run stops at its next step; a paused one is stopped now.
    """
    _act(load(config), task_key(task), "stop")
