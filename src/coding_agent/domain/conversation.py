"""The conversation context of seed 001 (SPEC 9.1) as plain values.

`context.conversation.build_conversation` builds it from a task and its comments;
`prompts.context_prompts.render_task_context` renders it. Kept here, below both, so the
renderer takes finished data and never reaches back into the builder.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["Role", "IssueInfo", "TurnMetadata", "Turn", "ContextSummary", "ConversationContext"]

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class IssueInfo:
    number: int
    title: str
    description: str
    labels: tuple[str, ...]
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class TurnMetadata:
    author: str
    created_at: str
    id: str
    is_completion: bool


@dataclass(frozen=True)
class Turn:
    role: Role
    content: str
    metadata: TurnMetadata

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise ValueError(f"a turn's role is 'user' or 'assistant', got {self.role!r}")


@dataclass(frozen=True)
class ContextSummary:
    total_comments: int
    truncated: bool
    oldest_included: str | None


@dataclass(frozen=True)
class ConversationContext:
    issue: IssueInfo
    conversation: tuple[Turn, ...]
    context_summary: ContextSummary

    def to_dict(self) -> dict[str, Any]:
        """The seed's JSON shape (lists, not tuples)."""
        data = asdict(self)
        data["issue"]["labels"] = list(self.issue.labels)
        data["conversation"] = list(data["conversation"])
        return data
