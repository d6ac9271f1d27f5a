"""The GitHub request path: githubkit over the shared `CachingTransport`, under the retry policy.

Every call goes through `call` (reads and idempotent writes: `retry_async`), `create`
(a POST that creates something: `write_once`, which checks before it retries) or
`graphql` (an idempotent mutation REST has no endpoint for). 5xx,
429, a rate-limit 403, timeouts and dropped connections become `TransientError` (with
the server's wait hint); anything else is a `ForgeError` naming the method, path and
status, never the token.

githubkit's own HTTP cache (hishel) is off: it dropped the request timeout. The shared
`CachingTransport` does its job instead (sources/http.py): every GET revalidates with
`If-None-Match`, GitHub answers 304 (free of rate limit) when nothing changed, and every
request has a deadline. Each client has its own cache, never shared between tokens.

A list page whose body is byte for byte the one parsed last time (the usual answer to a
steering checkpoint's comment listing: a 304, served from that cache) is not parsed
again: githubkit's pydantic parse of a page of comments costs more than the rest of the
request, and it ran at every checkpoint.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, TypeVar

import httpx
from githubkit import GitHub, Response
from githubkit.compat import type_validate_python
from githubkit.exception import GraphQLFailed, RequestError, RequestFailed, RequestTimeout
from githubkit.versions import RestVersionSwitcher
from pydantic import ValidationError

from coding_agent.errors import AgentError, ForgeError, TransientError
from coding_agent.redaction import Redactor
from coding_agent.retry import RetryPolicy, retry_async
from coding_agent.sources.github.app_auth import AppAuthStrategy, AppTokens
from coding_agent.sources.http import CachingTransport, rate_limited, retry_after, transient_status
from coding_agent.sources.writes import write_once

__all__ = ["GitHubClient", "GitHubNotFoundError", "PER_PAGE", "Sleep", "has_next_page"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

PER_PAGE = 100
# Parsed list pages remembered per client (least recently used go first): a few per task
# a worker is running is enough for the pages steering reads at every checkpoint.
PARSED_PAGES = 64
_NEXT_LINK = re.compile(r'<[^>]*>\s*;\s*rel="next"')


class GitHubNotFoundError(ForgeError):
    """GitHub answered 404: the issue, label, comment or user does not exist (or is hidden)."""


def _error_detail(response: httpx.Response) -> str:
    """GitHub's own `message` (and first error), shortened: it helps and holds no secret."""
    try:
        body = response.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    detail = str(body.get("message") or "")
    errors = body.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        first = errors[0].get("message") or errors[0].get("code")
        if first:
            detail = f"{detail} ({first})"
    return detail[:200]


def has_next_page(response: Response[Any], count: int) -> bool:
    """A `rel="next"` link, or a full page (in case a cached page kept an old Link)."""
    if count == 0:
        return False
    return bool(_NEXT_LINK.search(response.headers.get("link", ""))) or count >= PER_PAGE


class GitHubClient:
    """githubkit for one token and API URL; `rest` is githubkit's REST namespace."""

    def __init__(
        self,
        token: str,
        api_url: str,
        retry: RetryPolicy,
        sleep: Sleep,
        timeout: float,
        app: AppTokens | None = None,
    ) -> None:
        """`app`: a GitHub App's installation tokens instead of `token` (app_auth.py)."""
        self.token = token
        self.app = app
        self._retry = retry
        self._sleep = sleep
        self._transport = CachingTransport(timeout)
        self._github: GitHub[Any] = GitHub(
            AppAuthStrategy(app, api_url) if app is not None else token or None,
            base_url=api_url,
            auto_retry=False,
            timeout=timeout,
            user_agent="coding-agent",
            http_cache=False,
            async_transport=self._transport,
            # The bodies sent are this module's callers' own few fields; githubkit would
            # build a pydantic validator for each request's body type to check them
            # (measured: 7 ms of the event loop's time for the 32 label writes of 16 runs).
            rest_api_validate_body=False,
        )
        # "form path?page=n" -> (the body as received, what it parsed to): see the module's doc.
        self._pages: OrderedDict[str, tuple[bytes, Any]] = OrderedDict()

    @property
    def rest(self) -> RestVersionSwitcher:
        return self._github.rest

    def redact(self, text: str) -> str:
        secrets = [self.token] if self.token else []
        return Redactor(secrets + (self.app.secrets() if self.app is not None else [])).text(text)

    def _failure(self, method: str, path: str, response: httpx.Response) -> AgentError:
        status, headers = response.status_code, response.headers
        what = f"github {method} {path}"
        if transient_status(status, headers):
            return TransientError(
                f"{what} failed: HTTP {status}",
                retry_after=retry_after(headers),
                maybe_applied=not rate_limited(status, headers),
            )
        detail = _error_detail(response)
        message = self.redact(f"{what} failed: HTTP {status}" + (f": {detail}" if detail else ""))
        return GitHubNotFoundError(message) if status == 404 else ForgeError(message)

    async def _attempt(self, method: str, path: str, send: Callable[[], Awaitable[T]]) -> T:
        """One REST or GraphQL request; githubkit's errors become ours."""
        what = f"github {method} {path}"
        try:
            return await send()
        except RequestFailed as error:
            raise self._failure(method, path, error.response.raw_response) from None
        except RequestTimeout:
            raise TransientError(f"{what} timed out") from None
        except GraphQLFailed as failed:
            first = failed.response.errors[0] if failed.response.errors else None
            detail = f"{first.type or 'error'}: {first.message}"[:200] if first is not None else "error"
            raise ForgeError(self.redact(f"{what} failed: {detail}")) from None
        except RequestError as error:
            if isinstance(error.exc, AgentError):  # the app's token could not be had (app_auth.py)
                raise error.exc from None
            cause = type(error.exc).__name__
            if isinstance(error.exc, httpx.TransportError):
                raise TransientError(f"{what} failed: connection error ({cause})") from None
            raise ForgeError(f"{what} failed: {cause}") from None

    async def call(self, method: str, path: str, send: Callable[[], Awaitable[Response[T]]]) -> Response[T]:
        """One REST call with the retry policy (for reads and idempotent writes)."""
        return await retry_async(
            lambda: self._attempt(method, path, send), self._retry, f"github {method} {path}", sleep=self._sleep
        )

    async def create(
        self,
        path: str,
        send: Callable[[], Awaitable[Response[Any]]],
        find: Callable[[], Awaitable[Any | None]],
        item: Callable[[dict[str, Any]], Any] | None = None,
    ) -> Any:
        """A POST that creates something: retried only after `find` says it did not happen.
        The answer is githubkit's model, or with `item` its plain JSON made that (as `find`'s)."""

        async def post() -> Any:
            response = await self._attempt("POST", path, send)
            return self.data(response, "POST", path) if item is None else self.json_data(response, item, "POST", path)

        return await write_once(f"github POST {path}", post, find, self._retry, self._sleep)

    @staticmethod
    def data(response: Response[T], method: str, path: str) -> T:
        """githubkit's model of the answer, validated from the JSON the standard library read.

        Not `response.parsed_data`: pydantic's own JSON parser keeps each short string it
        makes in a process-wide cache (16,384 places, about 1.2 MB full). In a long
        `serve`, those strings, made among a request's short-lived objects and held for
        thousands of requests, pinned the allocator's pages, and were the only objects
        `bench_soak.py --trace` found alive out of the collector's sight and growing in
        number (docs/performance.md)."""
        try:
            return type_validate_python(response._data_model, response.json())
        except (ValidationError, ValueError):
            raise ForgeError(f"github {method} {path}: unexpected response shape") from None

    @staticmethod
    def json_data(response: Response[Any], item: Callable[[dict[str, Any]], T], method: str, path: str) -> T:
        """The answer read as plain JSON and made an `item` (see `get_json_pages`)."""
        try:
            return item(response.json())
        except (KeyError, TypeError, ValueError):
            raise ForgeError(f"github {method} {path}: unexpected response shape") from None

    async def get(self, path: str, send: Callable[[], Awaitable[Response[T]]]) -> T:
        return self.data(await self.call("GET", path, send), "GET", path)

    async def get_pages(self, path: str, fetch: Callable[[int], Awaitable[Response[list[T]]]]) -> list[T]:
        """Every page of a list endpoint, 100 at a time, each page retried on its own."""
        return await self._pages_of(path, fetch, lambda response: self.data(response, "GET", path), "models")

    async def _pages_of(
        self,
        path: str,
        fetch: Callable[[int], Awaitable[Response[Any]]],
        parse: Callable[[Response[Any]], list[T]],
        form: str,
    ) -> list[T]:
        """Every page, each parsed by `parse`; `form` names what it parses to, so that a page
        read as models and as plain JSON is never answered with the other's items."""
        items: list[T] = []
        page = 1
        while True:
            response = await self.call("GET", path, partial(fetch, page))
            chunk = self._page_data(f"{form} {path}?page={page}", response, parse)
            items.extend(chunk)
            if not has_next_page(response, len(chunk)):
                return items
            page += 1

    def _page_data(self, key: str, response: Response[Any], parse: Callable[[Response[Any]], list[T]]) -> list[T]:
        """`response`'s parsed items; the same list as last time when its body is unchanged.

        Keyed on the body's bytes, not on the ETag, so that no validator GitHub hands out
        (weak ones included) can make a changed page look unchanged. The list and its
        items are shared between calls: callers read them, never change them."""
        body = response.raw_response.content
        cached = self._pages.get(key)
        if cached is not None and cached[0] == body:
            self._pages.move_to_end(key)
            known: list[T] = cached[1]
            return known
        parsed = parse(response)
        self._pages[key] = (body, parsed)
        self._pages.move_to_end(key)
        while len(self._pages) > PARSED_PAGES:
            self._pages.popitem(last=False)
        return parsed

    async def get_json(self, path: str, send: Callable[[], Awaitable[Response[Any]]]) -> Any:
        """A GET read as plain JSON: for answers githubkit's models do not cover whole."""
        response = await self.call("GET", path, send)
        try:
            return response.json()
        except ValueError:
            raise ForgeError(f"github GET {path}: unexpected response shape") from None

    async def get_json_pages(
        self,
        path: str,
        fetch: Callable[[int], Awaitable[Response[Any]]],
        item: Callable[[dict[str, Any]], T] = lambda data: data,  # type: ignore[assignment,return-value]  # T = dict by default
    ) -> list[T]:
        """Every page of a list endpoint read as plain JSON objects, each made an `item`.

        Plain JSON costs a fraction of githubkit's model parse, which builds a model for
        every nested object (a comment's author alone has twenty fields)."""

        def parse(response: Response[Any]) -> list[T]:
            try:
                chunk = response.json()
            except ValueError:
                chunk = None
            if not isinstance(chunk, list):
                raise ForgeError(f"github GET {path}: unexpected response shape")
            try:
                return [item(data) for data in chunk if isinstance(data, dict)]
            except (KeyError, TypeError, ValueError):
                raise ForgeError(f"github GET {path}: unexpected response shape") from None

        return await self._pages_of(path, fetch, parse, getattr(item, "__qualname__", "json"))

    async def get_path_json(self, path: str, params: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        """A GET of an endpoint by its path, read as plain JSON (for what has no helper here),
        through the same cache: unchanged, it is a 304 and free of the rate limit."""
        return await self.get_json(
            path, lambda: self._github.arequest("GET", path, params=params, headers=headers, response_model=Any)
        )

    async def graphql(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        """One GraphQL request (for what REST cannot do), retried as REST calls are: only
        idempotent mutations go through here. An answer with errors is a `ForgeError`."""
        return await retry_async(
            lambda: self._attempt("POST", "/graphql", lambda: self._github.graphql.arequest(query, variables)),
            self._retry,
            "github POST /graphql",
            sleep=self._sleep,
        )

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """`Source.session`: githubkit's own context, which keeps its client for the block."""
        async with self._github:
            yield

    async def aclose(self) -> None:
        await self._transport.close_pool()
        if self.app is not None:
            await self.app.aclose()
