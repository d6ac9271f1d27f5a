"""Renders the system prompt and the task prompt from the Jinja templates in `prompts/`.

Public functions so that tests (and a dry run) can see exactly what the model is sent.
The system prompt is the stable part of every request; the task prompt is the first
user turn. Untrusted authors' text is wrapped here, once (SPEC 3).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jinja2

from coding_agent.domain.tasks import Comment, Task, Thread
from coding_agent.llm.types import ToolSpec

__all__ = ["render_system_prompt", "render_task_prompt", "wrap_untrusted", "RenderedComment"]

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("coding_agent.agent", "prompts"),
    autoescape=False,
    keep_trailing_newline=False,
    undefined=jinja2.StrictUndefined,
)

_FORGE_TITLES = {"github": "GitHub", "gitlab": "GitLab"}


def wrap_untrusted(author: str, text: str) -> str:
    """Mark text from a user without write access as data, not instructions."""
    safe = text.replace("</untrusted-content>", "&lt;/untrusted-content&gt;")
    return f'<untrusted-content author="{author}">\n{safe}\n</untrusted-content>'


@dataclass(frozen=True)
class RenderedComment:
    author: str
    created_at: str
    body: str


def _kind_words(task: Task) -> tuple[str, str]:
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
) -> str:
    """The system prompt: rules, reply protocol, tool list and each MCP server's own prompt."""
    _, noun = _kind_words(task)
    return _ENV.get_template("system.j2").render(
        task_kind=noun,
        forge_title=_FORGE_TITLES[task.key.forge],
        task_key=str(task.key),
        tools=tools,
        server_prompts=dict(server_prompts),
        protocol_instructions=protocol_instructions.strip(),
        show_schemas=show_schemas,
        language=language,
    )


def render_task_prompt(
    task: Task,
    comments: list[Comment],
    threads: list[Thread],
    is_trusted: Callable[[str], bool],
) -> str:
    """The first user turn: the issue or PR/MR, its comments and review threads."""

    def body_of(author: str, text: str) -> str:
        text = text.strip() or "(empty)"
        return text if is_trusted(author) else wrap_untrusted(author, text)

    def rendered(comment: Comment) -> RenderedComment:
        return RenderedComment(comment.author, comment.created_at.isoformat(), body_of(comment.author, comment.body))

    title, noun = _kind_words(task)
    context: dict[str, Any] = {
        "task": task,
        "kind_title": title,
        "kind_noun": noun,
        "description": body_of(task.author, task.body),
        "comments": [rendered(comment) for comment in comments],
        "threads": [
            {"id": thread.id, "path": thread.path, "line": thread.line, "comments": [rendered(c) for c in thread.comments]}
            for thread in threads
        ],
    }
    return _ENV.get_template("task.j2").render(**context)
