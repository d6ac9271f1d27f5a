"""The HTTP layer both forge adapters share: timeouts, conditional requests, failure kinds.

One place decides, for GitHub and GitLab alike:

- how long a request may take: `CachingTransport` bounds every request it sends by a
  deadline of its own, so no cache or client library in between can drop the timeout
  (githubkit's hishel cache did: it rebuilt each request without httpx's timeout, and a
  hung forge parked a worker for minutes);
- how much of a log is read: a GET for its last N bytes (`Range: bytes=-N`, how a CI
  log's tail is asked for) keeps at most N bytes, whatever the server sends
  (`ci_logs.last_lines` makes lines of them);
- how a repeated GET stays cheap: the last `ETag` of each URL goes out as
  `If-None-Match`, and a 304 (free of GitHub's rate limit) is answered from memory
  (`ETagCache`, bounded in entries and in bytes; SPEC 8.1, 13). Every GET is revalidated, so labels, assignees
  and comments are never served stale;
- which answers are worth retrying (`transient_status`) and how long to wait
  (`retry_after`: `Retry-After`, GitHub's `X-RateLimit-Reset`, GitLab's `RateLimit-Reset`);
- what a poll's "updated since" search asks: `since_the_hour`, the same URL for an
  hour, so that it is revalidated (304) rather than kept once more per poll;
- what is never asked twice: `LifetimeAnswers`, for the few answers that hold for the
  process's life (a repository's clone URL, the bot's own user, a label that exists),
  asked once per source;
- what is counted: every forge HTTP exchange, by forge and outcome (`FORGE_REQUESTS`,
  `count_request`). The counter is a prometheus_client collector that belongs to no
  registry; the dashboard's `/metrics` registers it in its own (web/metrics.py), so this
  layer needs nothing from the layers above it.

GitLab's client (python-gitlab) speaks `requests`, so it uses `ETagCache` and the two
functions directly; GitHub's (githubkit) speaks httpx and is handed `CachingTransport`.
"""

from __future__ import annotations

import asyncio
import contextvars
import ssl
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar
from urllib.request import getproxies_environment, proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport
from prometheus_client import Counter

from coding_agent.llm.tls import shared_tls_context
from coding_agent.retry import parse_retry_after

__all__ = [
    "CACHE_BYTES",
    "CACHE_ENTRIES",
    "CachedAnswer",
    "CachingTransport",
    "ETagCache",
    "FORGE_REQUESTS",
    "LifetimeAnswers",
    "count_request",
    "json_weight",
    "rate_limited",
    "retry_after",
    "since_the_hour",
    "transient_status",
]

V = TypeVar("V")

# Responses remembered per source for revalidation; the least recently used go first.
CACHE_ENTRIES = 1024
# ... and the most they may hold in memory together (bodies, headers and the objects
# around them: `CachedAnswer.weight`), per source. A search page of 100 items is about
# 150 kB: by entries alone, a bot with many open PRs kept up to 1,024 such answers,
# whatever their size.
CACHE_BYTES = 8 * 1024 * 1024

FORGE_REQUESTS = Counter(
    "coding_agent_forge_requests",
    "Forge HTTP requests sent by this process, by forge and outcome (status class, or error: no answer)",
    ["forge", "outcome"],
    registry=None,
)


def count_request(forge: str, status: int | None) -> None:
    """Count one exchange with `forge`: `status` None means no answer (timeout, refused)."""
    outcome = "error" if status is None else f"{status // 100}xx"
    FORGE_REQUESTS.labels(forge=forge, outcome=outcome).inc()


def since_the_hour(since: datetime) -> datetime:
    """`since` (UTC) rounded down to its hour, for the "updated since" of a search.

    The poll's follow-up searches look back a sliding window (`followup_days`). Exact to
    the second, each poll's URL would be new: never a 304, and each one more page of
    results in the `ETagCache`, which keeps up to `CACHE_ENTRIES` answers however large
    (a busy `serve` grew by one large page a poll). Rounded, the URL stays the same for an
    hour; the window is wider by less than that, and what it adds is checked like the rest.
    """
    return since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def json_weight(value: Any) -> int:
    """Bytes that `value`, parsed JSON, holds in memory, for a cache that keeps answers
    parsed (GitLab's pages and notes): every dict, list, string and number by
    `sys.getsizeof`, a dict key once however many objects use it (the parser shares them),
    and nothing for the interpreter's own objects (`_shared`). Weighed as
    the bytes received instead, a page of notes held 1.7 to 3 times what was counted."""
    size = 0
    keys: set[int] = set()  # the key strings counted (alive for the whole walk)
    pending = [value]
    while pending:
        item = pending.pop()
        if _shared(item):
            continue
        size += sys.getsizeof(item)
        if isinstance(item, dict):
            for key, inner in item.items():
                if id(key) not in keys and not _shared(key):
                    keys.add(id(key))
                    size += sys.getsizeof(key)
                pending.append(inner)
        elif isinstance(item, list):
            pending.extend(item)
    return size


def _shared(item: Any) -> bool:
    """None, the booleans, small integers and one-character strings: CPython keeps one
    of each, and parsing allocates nothing for them."""
    if item is None or isinstance(item, bool):
        return True
    if isinstance(item, int):
        return -5 <= item <= 256
    return isinstance(item, str) and len(item) <= 1 and item <= "\xff"


class ETagCache(Generic[V]):
    """A bounded, thread-safe map of request keys to the last answer that carried an ETag.

    Bounded twice, the least recently used going first: at most `entries` answers, and,
    when the cache is told what an answer weighs (`weigh`, in bytes), at most `max_bytes`
    of them together. An answer heavier than `max_bytes` alone is not kept: its next
    request is a plain GET, as it would be after its eviction.
    """

    def __init__(
        self, entries: int = CACHE_ENTRIES, max_bytes: int = CACHE_BYTES, weigh: Callable[[V], int] | None = None
    ) -> None:
        self._entries = entries
        self._max_bytes = max_bytes
        self._weigh = weigh
        self._items: OrderedDict[str, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def retained_bytes(self) -> int:
        """What the kept answers weigh together (0 without `weigh`)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: str, value: V) -> None:
        weight = self._weigh(value) if self._weigh is not None else 0
        with self._lock:
            self._drop(key)
            if weight > self._max_bytes:
                return
            self._items[key] = (value, weight)
            self._bytes += weight
            while len(self._items) > self._entries or self._bytes > self._max_bytes:
                self._drop(next(iter(self._items)))

    def _drop(self, key: str) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self._bytes -= item[1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


class LifetimeAnswers(Generic[V]):
    """Answers that hold for the process's life, asked of the forge once per key.

    Only for what does not change while the agent runs, or whose change an operator
    makes knowingly (moving a repository, renaming the bot): nothing here is revalidated,
    so such a change reaches the agent when it restarts. Everything steering or trust
    depends on is read fresh instead (`ETagCache` keeps those reads cheap, never stale).

    Askers of a key not yet known share its one request: the runs of a cycle start
    together, and each would otherwise miss and ask. A failed request is forgotten, so
    the next asker tries again.
    """

    def __init__(self) -> None:
        self._answers: dict[str, asyncio.Future[V]] = {}

    async def get(self, key: str, ask: Callable[[], Coroutine[Any, Any, V]]) -> V:
        answer = self._answers.get(key)
        if answer is not None and answer.done() and not answer.cancelled() and answer.exception() is None:
            return answer.result()  # known: readable from any event loop
        if answer is None or answer.get_loop() is not asyncio.get_running_loop():
            # (A source outliving its event loop, as `asyncio.run` twice in one process,
            # asks again rather than await a future of a loop that has gone.)
            # Asked in a context of its own: not through the HTTP client of the asker's
            # `Source.session`, which its asker may leave while others await the answer.
            answer = asyncio.get_running_loop().create_task(ask(), context=contextvars.Context())
            self._answers[key] = answer
            answer.add_done_callback(lambda done: self._forget_failure(key, done))
        # Shielded: an asker cancelled (its run stopped) does not cancel the others' answer.
        return await asyncio.shield(answer)

    def _forget_failure(self, key: str, answer: asyncio.Future[V]) -> None:
        if (answer.cancelled() or answer.exception() is not None) and self._answers.get(key) is answer:
            del self._answers[key]


def rate_limited(status: int, headers: Mapping[str, str]) -> bool:
    """429, or a 403 that is GitHub's primary or secondary rate limit: nothing was done."""
    lowered = {key.lower(): value for key, value in headers.items()}
    limit_403 = status == 403 and (lowered.get("x-ratelimit-remaining") == "0" or "retry-after" in lowered)
    return status == 429 or limit_403


def transient_status(status: int, headers: Mapping[str, str]) -> bool:
    """5xx, or a rate limit: worth asking again."""
    return status >= 500 or rate_limited(status, headers)


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asks us to wait, if it says: Retry-After, else a rate-limit reset."""
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    hinted = parse_retry_after(lowered.get("retry-after"))
    if hinted is not None:
        return hinted
    if lowered.get("x-ratelimit-remaining") == "0" and lowered.get("x-ratelimit-reset", "").isdigit():
        return max(int(lowered["x-ratelimit-reset"]) - time.time(), 0.0) + 1.0
    reset = lowered.get("ratelimit-reset")
    if reset:
        try:
            return max(float(reset) - time.time(), 0.0)
        except ValueError:
            return None
    return None


def _suffix_range(header: str | None) -> int | None:
    """N of a `Range: bytes=-N` header (the last N bytes), else None."""
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or not spec.startswith("-") or not spec[1:].isdigit():
        return None
    return int(spec[1:])


def _environment_proxy(url: httpx.URL) -> httpx.Proxy | None:
    """The proxy `HTTP_PROXY` / `HTTPS_PROXY` / `ALL_PROXY` name for `url`, unless
    `NO_PROXY` exempts its host (either case, as git, python-gitlab and the model client
    read them); None: direct. httpx reads them only when it makes the connections itself,
    and githubkit is handed this transport, so the GitHub client reads them here."""
    proxies = getproxies_environment()
    if proxy_bypass_environment(url.host, proxies):
        return None
    named = proxies.get(url.scheme) or proxies.get("all")
    return httpx.Proxy(named) if named else None


def _session(tls: ssl.SSLContext) -> aiohttp.ClientSession:
    """The pool's aiohttp session: httpx's default limits (100 connections, idle ones
    kept 5 s), and no cookie jar, so that nothing a response sets rides on later requests
    (httpx's short-lived clients kept none either)."""
    connector = aiohttp.TCPConnector(ssl=tls, limit=100, keepalive_timeout=5.0)
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())


def _what_happened(error: httpx.TimeoutException, request: httpx.Request) -> httpx.TransportError:
    """httpx-aiohttp reports every aiohttp connection error as a `ConnectTimeout`; one that
    is no timeout (refused, closed by the server, reset) becomes the httpx error that says
    what happened, so that a failure names it (still transient: a `TransportError`)."""
    cause = error.__cause__
    if not isinstance(cause, aiohttp.ClientConnectionError) or isinstance(cause, TimeoutError):
        return error
    kind: type[httpx.TransportError] = httpx.ReadError
    if isinstance(cause, aiohttp.ClientConnectorError):
        kind = httpx.ConnectError
    elif isinstance(cause, aiohttp.ServerDisconnectedError):
        kind = httpx.RemoteProtocolError
    return kind(str(cause) or type(cause).__name__, request=request)


# What a `CachedAnswer` holds besides its body and its headers' bytes: the answer, its
# ETag, and the cache's entry with its key (a URL), near enough.
_ANSWER_OBJECTS = 512


@dataclass(frozen=True)
class CachedAnswer:
    """A 200 answer as received: its raw (still encoded) body, and its headers as one
    bytes object (`name: value` lines), made into `httpx.Headers` again when it is used.

    Kept as httpx keeps headers, a cached answer was about 30 small objects (each
    header's name twice and its value, in a tuple), allocated among a request's
    short-lived ones and living for hundreds of polls: a cache always full, whose answers
    are replaced one by one, scattered them over the allocator's pages (see
    docs/performance.md, the soak)."""

    etag: str
    head: bytes
    raw: bytes

    @classmethod
    def of(cls, etag: str, headers: httpx.Headers, raw: bytes) -> CachedAnswer:
        return cls(etag, b"\r\n".join(name + b": " + value for name, value in headers.raw), raw)

    def headers(self) -> httpx.Headers:
        """The headers as received (a name holds no colon, a value no line break)."""
        lines = self.head.split(b"\r\n") if self.head else []
        return httpx.Headers([(name, value) for name, _, value in (line.partition(b": ") for line in lines)])

    def weight(self) -> int:
        """Bytes it holds in memory, near enough: the body, the headers and the objects
        around them (`_ANSWER_OBJECTS`)."""
        return sys.getsizeof(self.raw) + sys.getsizeof(self.head) + _ANSWER_OBJECTS


class CachingTransport(httpx.AsyncBaseTransport):
    """httpx transport with a per-request deadline, conditional GETs and one connection pool.

    githubkit opens a short-lived httpx client per call and closes it afterwards; every
    such client is handed this transport, whose `aclose()` is therefore ignored: the
    pool (and its TLS context) lives until `close_pool()`.

    The connections are aiohttp's, through httpx-aiohttp's transport (the one the openai
    SDK's aiohttp option is built on). httpcore 1.0's pool walks every connection, and
    for each idle one every connection again, each time a request comes or goes: with
    sixteen runs at once that bookkeeping cost more than the request itself (2.0 ms of
    CPU per request against 0.9 alone; aiohttp 0.5-0.8, flat). An aiohttp session serves
    the event loop it was made on, so the pool is made on first use in each loop.
    """

    def __init__(self, timeout: float, cache: ETagCache[CachedAnswer] | None = None, forge: str = "github") -> None:
        self._timeout = timeout
        self._forge = forge
        self.cache: ETagCache[CachedAnswer] = cache if cache is not None else ETagCache(weigh=CachedAnswer.weight)
        self._pool: AiohttpTransport | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None

    def _connections(self, url: httpx.URL) -> AiohttpTransport:
        """The pool of the running event loop, through the proxy the environment names for
        `url` (a client talks to one forge, so its first request decides)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            # One TLS context per process (`tls.py`), not a new one (and the system's CA
            # certificates loaded again) per pool.
            tls = shared_tls_context("httpx")
            self._pool = AiohttpTransport(verify=tls, proxy=_environment_proxy(url), client=lambda: _session(tls))
            self._pool_loop = loop
        return self._pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # httpcore's per-phase timeouts, in case a layer above dropped them ...
        request.extensions = {**request.extensions, "timeout": httpx.Timeout(self._timeout).as_dict()}
        status: int | None = None
        try:
            # ... and one deadline for the whole exchange, which a slow drip cannot stretch.
            async with asyncio.timeout(self._timeout):
                response = await self._exchange(request)
            status = response.status_code
            return response
        except TimeoutError:
            raise httpx.ReadTimeout(f"no complete answer within {self._timeout:g}s", request=request) from None
        except httpx.TimeoutException as error:
            raise _what_happened(error, request) from error.__cause__
        finally:
            count_request(self._forge, status)

    async def _exchange(self, request: httpx.Request) -> httpx.Response:
        if request.method != "GET":
            return (await self._read(await self._connections(request.url).handle_async_request(request), request))[0]
        tail = _suffix_range(request.headers.get("range"))
        if tail is not None:
            # The tail of a log: never cached, and never more than asked for kept in
            # memory, whatever the server sends (one that ignores the range included);
            # unencoded, since the tail of a compressed body cannot be decoded.
            request.headers["Accept-Encoding"] = "identity"
            response = await self._connections(request.url).handle_async_request(request)
            return (await self._read(response, request, keep=tail))[0]
        # `cache_partition`: a URL that answers differently per credential (a GitHub App's
        # installations share `/installation/repositories`) keeps an answer for each.
        key = f"{request.url}\n{request.headers.get('accept', '')}\n{request.extensions.get('cache_partition', '')}"
        cached = self.cache.get(key)
        if cached is not None:
            request.headers["If-None-Match"] = cached.etag
        response = await self._connections(request.url).handle_async_request(request)
        if response.status_code == 304 and cached is not None:
            # Read to the end of the (empty) answer before closing it: closing an answer
            # not read to its end closes the connection, and every checkpoint paid a new one.
            await self._read(response, request)
            # The stored answer, with the fresh rate-limit and date headers of the 304.
            headers = cached.headers()
            for name, value in response.headers.items():
                if name.lower().startswith(("x-ratelimit", "ratelimit", "date")):
                    headers[name] = value
            return httpx.Response(200, headers=headers, stream=httpx.ByteStream(cached.raw), request=request)
        response, raw = await self._read(response, request)
        etag = response.headers.get("etag")
        if response.status_code == 200 and etag:
            self.cache.put(key, CachedAnswer.of(etag, response.headers, raw))
        return response

    @staticmethod
    async def _read(
        response: httpx.Response, request: httpx.Request, keep: int | None = None
    ) -> tuple[httpx.Response, bytes]:
        """The whole (still encoded) body read inside the deadline; the client decodes it.
        With `keep`, only the body's last `keep` bytes are kept (a ranged read's cap)."""
        kept: deque[bytes] = deque()
        size = 0
        try:
            async for chunk in response.aiter_raw():
                kept.append(chunk)
                size += len(chunk)
                while keep is not None and kept and size - len(kept[0]) >= keep:
                    size -= len(kept.popleft())
        finally:
            await response.aclose()
        raw = b"".join(kept)
        headers = response.headers
        if keep is not None and len(raw) > keep:
            raw = raw[len(raw) - keep :]
            headers = httpx.Headers([(k, v) for k, v in headers.multi_items() if k.lower() != "content-length"])
        read = httpx.Response(
            response.status_code,
            headers=headers,
            stream=httpx.ByteStream(raw),
            extensions=response.extensions,
            request=request,
        )
        return read, raw

    async def aclose(self) -> None:
        """Ignored: called by every short-lived githubkit client."""

    async def close_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._pool_loop is asyncio.get_running_loop():
            await pool.aclose()
        self.cache.clear()
