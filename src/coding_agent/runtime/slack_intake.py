"""A mention of the bot in Slack, taken in (SPEC 18): deduplicated, mapped, checked, answered.

An `app_mention` in a channel that `chat.slack.channels` maps to a repository, by a Slack
user that `chat.slack.users` maps to a forge login with write access there (section 3's
rule), is a request keyed `slack:CHANNEL/THREAD_TS`. A user that maps to nobody, or to a
login without write access, gets one reply in the thread saying why, and nothing runs.

The event id is recorded in the state store's delivery log first, so an event Slack
delivers twice (its retries, a second process) is taken in once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from coding_agent.config.chat import SlackConfig
from coding_agent.domain.tasks import TaskKey
from coding_agent.prompts.notices import Language, notice
from coding_agent.runtime.producer import source_for
from coding_agent.sources.base import Source
from coding_agent.sources.slack import SlackChat, thread_key
from coding_agent.store.deliveries import DeliveryLog

__all__ = ["SlackIntake", "EYES"]

log = logging.getLogger(__name__)

EYES = "eyes"  # 👀: the first reaction, the request is seen


class SlackIntake:
    def __init__(
        self, settings: SlackConfig, chat: SlackChat, sources: list[Source], deliveries: DeliveryLog, language: Language
    ) -> None:
        self._settings = settings
        self._chat = chat
        self._sources = sources
        self._deliveries = deliveries
        self._language = language

    @property
    def chat(self) -> SlackChat:
        return self._chat

    async def mention(self, event_id: str, event: Mapping[str, Any]) -> str | None:
        """Take in one `app_mention`; the thread's key when the request is accepted, else None."""
        channel, user, ts = event.get("channel"), event.get("user"), event.get("ts")
        thread_ts = event.get("thread_ts") or ts
        if not all(isinstance(value, str) for value in (channel, user, ts, thread_ts)) or not event_id:
            log.warning("slack: an app_mention without channel, user or ts ignored")
            return None
        assert isinstance(channel, str) and isinstance(user, str) and isinstance(ts, str) and isinstance(thread_ts, str)
        try:
            key = thread_key(channel, thread_ts)
        except ValueError as error:
            log.warning("slack: app_mention refused: %s", error)
            return None
        if not await asyncio.to_thread(self._deliveries.first, f"slack:{event_id[:150]}"):
            log.info("%s: slack event %s seen before; ignored", key, event_id[:150])
            return None
        repository = self._settings.channels.get(channel)
        if repository is None:
            log.info("%s: channel %s maps to no repository (chat.slack.channels); ignored", key, channel)
            return None
        forge, _, project = repository.partition(":")
        login = self._settings.users.get(user)
        if login is None:
            log.warning("%s: Slack user %s maps to no %s login; refused", key, user, forge)
            await self._chat.reply(channel, thread_ts, notice("slack_unmapped_user", self._language, user=user, forge=forge))
            return None
        source = source_for(self._sources, f"{forge}:")
        if source is None:  # the config's check makes every mapped forge a task source
            log.error("%s: no %s source for %s", key, forge, repository)
            return None
        # The repository's access, asked as for any task of it (the forge reads only the project).
        probe = TaskKey.parse(f"{repository}#1")
        permission = await source.get_permission(probe, login)
        if not permission.can_write:
            log.warning("%s: %s (%s, %s access) refused", key, user, login, permission.value)
            await self._chat.reply(
                channel, thread_ts,
                notice("slack_untrusted_user", self._language, login=login, forge=forge, repository=project),
            )
            return None
        await self._chat.react(channel, ts, EYES)
        log.info("%s: request by %s (%s) for %s accepted", key, user, login, repository)
        await self._chat.reply(
            channel, thread_ts, notice("slack_not_yet", self._language, key=key, repository=project, forge=forge)
        )
        return key
