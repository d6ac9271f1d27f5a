"""The Slack testing server's Web API: the methods the agent calls, answered as Slack does.

Slack answers HTTP 200 with `{"ok": false, "error": ...}` for a refused call, reads its
arguments from the query, a form or a JSON body alike, and takes the token from
`Authorization: Bearer`; slack_sdk's clients rely on each of these."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from coding_agent.sandbox.slack.state import SlackCall, SlackState

__all__ = ["create_slack_app", "SocketHub"]


class SocketHub:
    """The Socket Mode connections open now: an envelope pushed from any thread goes to each."""

    def __init__(self) -> None:
        self._connections: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[dict[str, Any]]]] = []

    @property
    def connected(self) -> int:
        return len(self._connections)

    def push(self, envelope: dict[str, Any]) -> None:
        for loop, queue in list(self._connections):
            loop.call_soon_threadsafe(queue.put_nowait, envelope)

    def _add(self, queue: asyncio.Queue[dict[str, Any]]) -> tuple[asyncio.AbstractEventLoop, asyncio.Queue[dict[str, Any]]]:
        entry = (asyncio.get_running_loop(), queue)
        self._connections.append(entry)
        return entry

    def _remove(self, entry: tuple[asyncio.AbstractEventLoop, asyncio.Queue[dict[str, Any]]]) -> None:
        if entry in self._connections:
            self._connections.remove(entry)


async def _arguments(request: Request) -> dict[str, Any]:
    args: dict[str, Any] = dict(request.query_params)
    if request.method == "POST":
        kind = request.headers.get("content-type", "")
        if kind.startswith("application/json"):
            body = await request.body()
            if body:
                data = json.loads(body)
                if isinstance(data, dict):
                    args.update(data)
        else:
            form = await request.form()
            args.update({key: value for key, value in form.items() if isinstance(value, str)})
    return args


def _token(request: Request, args: dict[str, Any]) -> str | None:
    header = request.headers.get("authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ")
    token = args.pop("token", None)
    return token if isinstance(token, str) else None


def create_slack_app(state: SlackState, hub: SocketHub | None = None) -> Starlette:
    """The Web API at `/api/{method}`; with `hub`, Socket Mode too (`apps.connections.open`
    with the app token hands out `/socket-mode`'s URL)."""
    hub = hub or SocketHub()
    def error(code: str) -> JSONResponse:
        return JSONResponse({"ok": False, "error": code})

    async def method(request: Request) -> JSONResponse:
        name = request.path_params["method"]
        args = await _arguments(request)
        token = _token(request, args)
        state.record(SlackCall(name, token, dict(args)))
        fault = state.take_fault(name)
        if fault is not None:
            if fault.gate is not None:
                await asyncio.to_thread(fault.gate.wait, 30)
            if fault.status == 429:
                return JSONResponse(
                    {"ok": False, "error": "ratelimited"}, status_code=429, headers={"Retry-After": str(fault.retry_after)}
                )
            if fault.status is not None:
                return JSONResponse({"ok": False, "error": "fatal_error"}, status_code=fault.status)
        if name == "apps.connections.open":
            if state.app_token is None or token != state.app_token:
                return error("invalid_auth" if token else "not_authed")
            return JSONResponse({"ok": True, "url": str(request.url_for("socket_mode")).replace("http", "ws", 1)})
        if token != state.bot_token:
            return error("invalid_auth" if token else "not_authed")
        handler = _HANDLERS.get(name)
        if handler is None:
            return error("unknown_method")
        try:
            return JSONResponse({"ok": True, **handler(state, args)})
        except KeyError as missing:
            return error(str(missing.args[0]).split(":")[0] if missing.args else "invalid_arguments")
        except (PermissionError, ValueError) as refused:
            return error(str(refused))

    async def socket_mode(websocket: WebSocket) -> None:
        """Slack's Socket Mode: `hello`, then each pushed envelope; the app answers with its envelope id."""
        await websocket.accept()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        entry = hub._add(queue)
        await websocket.send_json({"type": "hello", "num_connections": hub.connected, "connection_info": {"app_id": "A0SANDBOX"}})

        async def send() -> None:
            while True:
                await websocket.send_json(await queue.get())

        sender = asyncio.create_task(send())
        try:
            while True:
                text = await websocket.receive_text()
                try:
                    data = json.loads(text)
                except ValueError:
                    continue
                if isinstance(data, dict) and isinstance(data.get("envelope_id"), str):
                    with state._lock:
                        state.acks.append(data["envelope_id"])
        except WebSocketDisconnect:
            pass
        finally:
            hub._remove(entry)
            sender.cancel()

    return Starlette(
        routes=[
            Route("/api/{method}", method, methods=["GET", "POST"]),
            WebSocketRoute("/socket-mode", socket_mode, name="socket_mode"),
        ]
    )


def _auth_test(state: SlackState, args: dict[str, Any]) -> dict[str, Any]:
    return {"url": "https://sandbox.slack.test/", "team": "sandbox", "team_id": state.team, "user": "coding-agent",
            "user_id": state.bot_user, "bot_id": "B0BOT", "is_enterprise_install": False}


def _post(state: SlackState, args: dict[str, Any]) -> dict[str, Any]:
    message = state.post(str(args["channel"]), state.bot_user, str(args.get("text", "")), args.get("thread_ts") or None)
    return {"channel": message.channel, "ts": message.ts, "message": message.as_json()}


def _update(state: SlackState, args: dict[str, Any]) -> dict[str, Any]:
    message = state.update(str(args["channel"]), str(args["ts"]), state.bot_user, str(args.get("text", "")))
    return {"channel": message.channel, "ts": message.ts, "text": message.text}


def _react(state: SlackState, args: dict[str, Any]) -> dict[str, Any]:
    state.react(str(args["channel"]), str(args["timestamp"]), state.bot_user, str(args["name"]))
    return {}


def _replies(state: SlackState, args: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [m.as_json() for m in state.thread(str(args["channel"]), str(args["ts"]))], "has_more": False}


def _history(state: SlackState, args: dict[str, Any]) -> dict[str, Any]:
    limit = int(args.get("limit") or 100)
    return {"messages": [m.as_json() for m in state.history(str(args["channel"]), limit)], "has_more": False}


def _users_info(state: SlackState, args: dict[str, Any]) -> dict[str, Any]:
    user = state.users.get(str(args["user"]))
    if user is None:
        raise KeyError("user_not_found")
    profile = {"real_name": user.name, "display_name": user.name, **({"email": user.email} if user.email else {})}
    return {"user": {"id": user.id, "name": user.name, "is_bot": user.is_bot, "profile": profile}}


_HANDLERS = {
    "auth.test": _auth_test,
    "chat.postMessage": _post,
    "chat.update": _update,
    "reactions.add": _react,
    "conversations.replies": _replies,
    "conversations.history": _history,
    "users.info": _users_info,
}
