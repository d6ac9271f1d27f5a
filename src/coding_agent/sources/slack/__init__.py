"""Slack as a source of tasks (SPEC 18): its Web API client and the thread keys."""

from coding_agent.sources.slack.client import SlackChat, thread_key

__all__ = ["SlackChat", "thread_key"]
