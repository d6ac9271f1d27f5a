"""Renders the system prompt from the Jinja templates in `templates/`, and wraps untrusted text.

Public functions so that tests (and a dry run) can see exactly what the model is sent.
The system prompt is the stable part of every request; the task prompt (the first user
turn) is `context.first_turn.render_task_prompt`. Untrusted authors' text is wrapped
with `prompts.untrusted.UntrustedWrapper`, once, by whatever builds the structures (SPEC 3).
"""

from __future__ import annotations

from collections.abc import Mapping

import jinja2

from coding_agent.domain.chat import ToolSpec
from coding_agent.domain.tasks import Task
from coding_agent.prompts.untrusted import UntrustedWrapper

__all__ = ["render_system_prompt", "text", "template", "task_kind_words"]

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("coding_agent.prompts", "templates"),
    autoescape=False,
    keep_trailing_newline=False,
    undefined=jinja2.StrictUndefined,
)

_FORGE_TITLES = {"github": "GitHub", "gitlab": "GitLab"}


def template(name: str) -> jinja2.Template:
    """A template of `templates/`, for every prompt module: one environment, one set of rules."""
    return _ENV.get_template(name)


def text(name: str, **values: object) -> str:
    """The template `name` filled with `values`: every fixed prompt text is one of these."""
    return _ENV.get_template(name).render(**values)


def task_kind_words(task: Task) -> tuple[str, str]:
    """("Issue", "issue"), ("Pull request", "pull request") or ("Merge request", "merge request")."""
    if not task.key.is_change:
        return "Issue", "issue"
    return ("Pull request", "pull request") if task.key.forge == "github" else ("Merge request", "merge request")


def render_system_prompt(
    task: Task,
    tools: list[ToolSpec],
    server_prompts: Mapping[str, str],
    protocol_instructions: str,
    show_schemas: bool,
    language: str = "en",
    repository_rules: Mapping[str, str] | None = None,
    untrusted: UntrustedWrapper | None = None,
) -> str:
    """The system prompt: rules, reply protocol, tool list, each MCP server's own prompt,
    and the repository's own rule files (path -> text, already size-capped).

    `untrusted`: the run's wrapper, whose tag the prompt names (the one the first turn and
    later comments are wrapped in). Rule files go here only when the task's trigger
    controls them; a PR head written by an untrusted author is not a source of rules.
    """
    _, noun = task_kind_words(task)
    return _ENV.get_template("system.j2").render(
        task_kind=noun,
        forge_title=_FORGE_TITLES[task.key.forge],
        task_key=str(task.key),
        tools=tools,
        server_prompts=dict(server_prompts),
        protocol_instructions=protocol_instructions.strip(),
        show_schemas=show_schemas,
        language=language,
        repository_rules=dict(repository_rules or {}),
        untrusted_tag=(untrusted or UntrustedWrapper.new()).tag,
    )

