"""How the loop treats replies: the one hook planning mode (SPEC 10) plugs into.

The section-4 loop owns the history, the limits, the checkpoints, tool calls and the loop
guard. What it sends before a request, how it reads a reply and how it corrects an
unusable one is asked of a `LoopPolicy`. The plain loop's policy is `ProtocolPolicy`:
the reply protocol as it is. Planning mode's policy (`agent.planning`) adds the phases
on top, so that both modes share one loop and cannot drift apart.
"""

from __future__ import annotations

from typing import Protocol

from coding_agent.llm.base import LLMClient
from coding_agent.llm.protocols import JsonTextProtocol, ParsedReply, ReplyProtocol
from coding_agent.llm.types import LLMReply, ToolSpec

__all__ = ["LoopPolicy", "ProtocolPolicy"]


class LoopPolicy(Protocol):
    protocol: ReplyProtocol  # how tool results are sent back (the loop's own part of a step)

    def prepare(self, llm: LLMClient, tools: list[ToolSpec]) -> None:
        """Offer the tools (once, before the first request)."""
        ...

    async def before_request(self, llm: LLMClient) -> None:
        """Right before a request, after its checkpoint: may add the next prompt to the
        history (may raise an `AgentError` to fail the run)."""
        ...

    def parse(self, reply: LLMReply) -> ParsedReply:
        """What the reply asks for. Pure: a reply acted on after a resume is parsed again."""
        ...

    async def accept(self, llm: LLMClient, decision: ParsedReply) -> ParsedReply:
        """The reply is being acted on (past its checkpoint): apply it; returns what the
        loop still does with it (post its comment, run its tools, end the run)."""
        ...

    def send_correction(self, llm: LLMClient, reply: LLMReply, error: str) -> None:
        """Answer an unusable reply."""
        ...

    def describe(self) -> str:
        """Where the run stands, appended to a limit's or a failure's comment ("" if nothing)."""
        ...

    def fall_back_to_text(self, llm: LLMClient) -> None:
        """The server refused native tools (`llm.function_calling: auto`): go on in JSON
        text, tools no longer offered; a request prepared for tools is prepared again."""
        ...


class ProtocolPolicy:
    """The plain loop of SPEC 4: the protocol's own reading of replies, nothing added."""

    def __init__(self, protocol: ReplyProtocol) -> None:
        self.protocol = protocol

    def prepare(self, llm: LLMClient, tools: list[ToolSpec]) -> None:
        self.protocol.prepare(llm, tools)

    async def before_request(self, llm: LLMClient) -> None:
        return None

    def parse(self, reply: LLMReply) -> ParsedReply:
        return self.protocol.parse(reply)

    async def accept(self, llm: LLMClient, decision: ParsedReply) -> ParsedReply:
        return decision

    def send_correction(self, llm: LLMClient, reply: LLMReply, error: str) -> None:
        llm.send_user_message(self.protocol.correction_message(error))

    def describe(self) -> str:
        return ""

    def fall_back_to_text(self, llm: LLMClient) -> None:
        self.protocol = JsonTextProtocol()
        self.protocol.prepare(llm, [])
