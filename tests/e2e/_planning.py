"""What the planning e2e tests share: the a1-a3 plan, its scripts, and reading requests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from coding_agent.sandbox.replay_model import RecordedRequest

from ._steering import steering_config
from .conftest import ForgeUnderTest

__all__ = ["plan", "action", "create_then_done", "planning_config", "markers", "marker_of", "tool_names"]


def action(ident: str, description: str) -> dict[str, Any]:
    return {"id": ident, "subtask": "s1", "description": description, "tool_hints": ["workspace/create"], "expected_outcome": f"{description} done"}


def plan(*actions: dict[str, Any]) -> dict[str, Any]:
    actions = actions or (action("a1", "Write a.txt"), action("a2", "Write b.txt"), action("a3", "Write c.txt"))
    return {
        "goal_understanding": {"main_objective": "Write a.txt, b.txt and c.txt", "success_criteria": ["the three files exist"], "constraints": []},
        "task_decomposition": {"reasoning": "one file per action", "subtasks": [{"id": "s1", "description": "the files", "dependencies": []}]},
        "action_plan": {"actions": copy.deepcopy(list(actions))},
    }


def create_then_done(ident: str, path: str, status: str = "done", before: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """An action's two replies: one `workspace/create`, then `action_done`."""
    create: dict[str, Any] = {"tool": "workspace/create", "args": {"path": path, "content": f"{path}\n"}, "comment": f"Writing {path}."}
    if before is not None:
        create["before"] = before
    return [create, {"action_done": {"id": ident, "status": status, "summary": f"{path}: {status}"}}]


def planning_config(
    directory: Path, forges: list[ForgeUnderTest], replay: Any, function_calling: bool = True, extra: dict[str, Any] | None = None, **planning: Any
) -> Any:
    """A steering config with planning on; `planning` overrides its keys, `extra` other sections."""
    settings = {"enabled": True, **planning}
    return steering_config(directory, forges, replay, function_calling=function_calling, planning=settings, **(extra or {}))


def marker_of(request: RecordedRequest) -> str:
    """The latest phase marker line the request carries."""
    found = ""
    for message in request.body.get("messages", []):
        content = str(message.get("content") or "")
        if message.get("role") == "user" and content.startswith("[Phase: "):
            found = content.splitlines()[0]
    return found


def markers(requests: list[RecordedRequest]) -> list[str]:
    return [marker_of(request) for request in requests]


def tool_names(request: RecordedRequest) -> list[str]:
    return [tool["function"]["name"] for tool in request.body.get("tools") or []]
