"""A Slack-compatible testing server (SPEC 18): the Web API methods the agent calls, in memory.

    with SlackSandbox(bot_token) as slack:
        slack.state.add_channel("C0DEV", "dev")
        message = slack.state.post("C0DEV", "U0ALICE", "<@U0BOT> fix the README")
        # POST mention_event(slack.state, message) to /slack/events, signed_headers(...)
"""

from coding_agent.sandbox.slack.events import encode, mention_event, signed_headers
from coding_agent.sandbox.slack.sandbox import SlackSandbox
from coding_agent.sandbox.slack.state import SlackCall, SlackMessage, SlackState, SlackUser

__all__ = ["SlackSandbox", "SlackState", "SlackCall", "SlackMessage", "SlackUser", "mention_event", "signed_headers", "encode"]
