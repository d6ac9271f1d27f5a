"""The GitLab request path: python-gitlab in a worker thread, under the retry policy.

python-gitlab is blocking, so every call runs in a worker thread; every call also goes
through the shared `RetryPolicy`, with python-gitlab's own retrying switched off (it
would sleep for whatever `Retry-After` says, uncapped, and hide 429s from our policy).
Failures are classified as for GitHub (sources/http.py); a POST that creates something
goes through `create` (`write_once`: it checks before it retries).

Reads that steering repeats at every checkpoint (the item, its notes, discussions) are
conditional requests: the last `ETag` goes out as `If-None-Match` and a 304 answers from
memory (SPEC 8.1, 13). Notes are fetched newest-updated first and only until a note we
already hold unchanged, so a long thread costs one request, not one per page.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast
from urllib.parse import urlencode

import gitlab
import requests
from gitlab.exceptions import GitlabError
from requests.structures import CaseInsensitiveDict

from coding_agent.domain.tasks import TaskKey, TaskKind
from coding_agent.errors import ForgeError, TransientError
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy, retry_async
from coding_agent.sources.ci_logs import TailBuffer
from coding_agent.sources.gitlab.mapping import JSON
from coding_agent.sources.http import (
    ETagCache,
    count_request,
    json_weight,
    rate_limited,
    retry_after,
    transient_status,
)
from coding_agent.sources.writes import write_once

__all__ = ["GitLabClient", "PER_PAGE"]

T = TypeVar("T")

PER_PAGE = 100  # GitLab's maximum
_TRANSPORT_ERRORS = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)
_CHUNK = 64 * 1024
_RANGE_START = re.compile(r"bytes\s+(\d+)-")


class _Client(gitlab.Gitlab):
    """python-gitlab with its internal retries off: 429 and 5xx surface to our RetryPolicy."""

    def http_request(self, verb: str, path: str, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs["obey_rate_limit"] = False
        kwargs["retry_transient_errors"] = False
        return super().http_request(verb, path, *args, **kwargs)


@dataclass(frozen=True)
class _Page:
    """A GET answer; `fresh` is False when the server said 304 and `data` came from memory."""

    data: Any
    headers: Mapping[str, str]
    fresh: bool

    def weight(self) -> int:
        """What keeping it costs: the parsed body, and the headers as text."""
        return json_weight(self.data) + sum(len(name) + len(value) + 100 for name, value in self.headers.items())


class GitLabClient:
    """python-gitlab for one token and instance; `gl` is the python-gitlab client."""

    def __init__(
        self,
        url: str,
        token: str | None,
        retry: RetryPolicy,
        sleep: Callable[[float], Awaitable[None]],
        timeout: float,
    ) -> None:
        self.token = token
        self._retry = retry
        self._sleep = sleep
        session = requests.Session()
        session.hooks["response"].append(self._remember_response)
        self.gl = _Client(url, private_token=token, timeout=timeout, retry_transient_errors=False, session=session)
        self._local = threading.local()
        self._pages: ETagCache[_Page] = ETagCache(weigh=_Page.weight)
        self._notes: ETagCache[dict[int, JSON]] = ETagCache(weigh=json_weight)

    def _remember_response(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        """requests hook: python-gitlab's errors drop the headers, and Retry-After lives
        there. Every answer passes here once, so it is also where GitLab's are counted."""
        self._local.response = response
        count_request("gitlab", response.status_code)

    async def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run blocking `fn` in a thread under the retry policy; `what` names it in errors and logs."""

        async def attempt() -> T:
            return await asyncio.to_thread(self._guarded, what, fn)

        return await retry_async(attempt, self._retry, f"gitlab {what}", sleep=self._sleep)

    async def create(self, what: str, fn: Callable[[], T], find: Callable[[], Awaitable[T | None]]) -> T:
        """A POST that creates something: retried only after `find` says it did not happen."""
        return await write_once(
            f"gitlab {what}", lambda: asyncio.to_thread(self._guarded, what, fn), find, self._retry, self._sleep
        )

    def _guarded(self, what: str, fn: Callable[[], T]) -> T:
        self._local.response = None
        try:
            return fn()
        except _TRANSPORT_ERRORS as error:
            count_request("gitlab", None)
            kind = "timed out" if isinstance(error, requests.Timeout) else "connection failed"
            raise TransientError(f"gitlab {what}: {kind}") from error
        except GitlabError as error:
            raise self._translate(what, error) from error

    def _translate(self, what: str, error: GitlabError) -> Exception:
        code = error.response_code
        response: requests.Response | None = getattr(self._local, "response", None)
        headers = response.headers if response is not None and response.status_code == code else {}
        if code is not None and transient_status(code, headers):
            return TransientError(
                f"gitlab {what}: HTTP {code}",
                retry_after=retry_after(headers),
                maybe_applied=not rate_limited(code, headers),
            )
        detail = self.redact(str(error.error_message))[:300]
        status = f"HTTP {code}" if code is not None else type(error).__name__
        return ForgeError(f"gitlab {what} failed: {status} {detail}".rstrip())

    def redact(self, text: str) -> str:
        return Redactor([self.token] if self.token else []).text(text)

    def get(self, path: str, query: Mapping[str, Any] | None = None, *, conditional: bool = True) -> _Page:
        """GET with `If-None-Match` from the last answer to the same URL (blocking)."""
        query = dict(query or {})
        key = f"{path}?{urlencode(sorted(query.items()))}"
        cached = self._pages.get(key) if conditional else None
        headers = {"If-None-Match": cached.headers["ETag"]} if cached is not None else None
        try:
            response = self.gl.http_request("get", path, query_data=query, extra_headers=headers)
        except GitlabError as error:
            if error.response_code == 304 and cached is not None:
                return _Page(cached.data, cached.headers, fresh=False)
            raise
        page = _Page(response.json(), CaseInsensitiveDict(response.headers), fresh=True)
        if conditional and "ETag" in page.headers:
            self._pages.put(key, page)
        return page

    def get_all(self, path: str, query: Mapping[str, Any] | None = None) -> list[JSON]:
        """Every page of a listing, each page a conditional request (blocking)."""
        items: list[JSON] = []
        number: int | None = 1
        while number is not None:
            data, number = self.page(path, query or {}, number)
            items.extend(data)
        return items

    def page(
        self, path: str, query: Mapping[str, Any], number: int, *, conditional: bool = True
    ) -> tuple[list[JSON], int | None]:
        """Page `number` of a listing (`PER_PAGE` items) and the next page's number, None
        after the last (`X-Next-Page`); `conditional` as for `get` (blocking)."""
        page = self.get(path, {**query, "per_page": PER_PAGE, "page": number}, conditional=conditional)
        next_page = page.headers.get("X-Next-Page") or ""
        return page.data, int(next_page) if next_page.isdigit() else None

    def tail(self, path: str, limit: int) -> tuple[bytes, bool] | None:
        """The last `limit` bytes of a plain-text answer (a job trace), and whether they
        start inside it; None for a 404 (blocking).

        Asks for `Range: bytes=-limit`. GitLab's trace endpoint itself ignores the header
        and sends the whole trace (a proxy in front may honour it: then a 206 carries
        only the tail); either way the answer is streamed and only its last `limit`
        bytes are kept, so a 50 MB trace never sits in memory. A 416 is an empty trace.
        """
        try:
            response = cast(  # raw=True: the response itself, not its JSON
                requests.Response, self.gl.http_get(path, streamed=True, raw=True, extra_headers={"Range": f"bytes=-{limit}"})
            )
        except GitlabError as error:
            if error.response_code in (404, 416):
                return None if error.response_code == 404 else (b"", False)
            raise
        with contextlib.closing(response):
            buffer = TailBuffer(limit)
            for chunk in response.iter_content(chunk_size=_CHUNK):
                buffer.feed(chunk)
            ranged = response.status_code == 206
            start = _RANGE_START.match(response.headers.get("Content-Range", "")) if ranged else None
        return buffer.data, buffer.cut or (start is not None and int(start[1]) > 0)

    def manager(self, key: TaskKey) -> Any:
        project = self.gl.projects.get(key.project, lazy=True)
        return project.issues if key.kind is TaskKind.ISSUE else project.mergerequests

    def notes(self, path: str) -> list[JSON]:
        """All notes, re-reading only what changed since the last call (blocking).

        Ordered by `updated_at` descending, every new or edited note comes before every
        note we already hold unchanged, so the walk stops at the first of those. A
        changed `X-Total` afterwards means deletions: then everything is read again.
        """
        query = {"order_by": "updated_at", "sort": "desc", "per_page": PER_PAGE}
        first = self.get(path, {**query, "page": 1})
        known = self._notes.get(path)
        if not first.fresh and known is not None:
            return list(known.values())
        merged = self._walk_notes(path, query, first, known or {})
        total = str(first.headers.get("X-Total", ""))
        if known and total.isdigit() and int(total) != len(merged):
            merged = self._walk_notes(path, query, first, {})
        self._notes.put(path, merged)
        return list(merged.values())

    def _walk_notes(self, path: str, query: Mapping[str, Any], first: _Page, known: dict[int, JSON]) -> dict[int, JSON]:
        merged = dict(known)
        page = first
        while True:
            reached_known = False
            for note in page.data:
                held = known.get(note["id"])
                if held is not None and held.get("updated_at") == note.get("updated_at"):
                    reached_known = True
                    break
                merged[note["id"]] = note
            next_page = str(page.headers.get("X-Next-Page") or "")
            if reached_known or not next_page.isdigit():
                return merged
            page = self.get(path, {**query, "page": int(next_page)}, conditional=False)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.gl.session.close)
