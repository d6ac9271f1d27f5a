"""`ETagCache`: bounded in bytes as well as in entries, the least recently used going first."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import httpx

from coding_agent.sources.http import CachedAnswer, ETagCache, json_weight


def _answer(size: int) -> CachedAnswer:
    return CachedAnswer.of('"etag"', httpx.Headers({"content-type": "application/json"}), b"x" * size)


def test_retained_bytes_stay_under_the_cap_after_many_large_answers() -> None:
    cache: ETagCache[CachedAnswer] = ETagCache(entries=1024, max_bytes=1_000_000, weigh=CachedAnswer.weight)
    for index in range(500):
        cache.put(f"/search?page={index}", _answer(150_000))
    assert cache.retained_bytes <= 1_000_000
    assert len(cache) == 6  # the newest six of 150 kB (and their headers) fit
    assert cache.get("/search?page=499") is not None and cache.get("/search?page=0") is None


def test_replacing_an_answer_counts_it_once_and_a_too_large_one_is_not_kept() -> None:
    cache: ETagCache[CachedAnswer] = ETagCache(max_bytes=1_000_000, weigh=CachedAnswer.weight)
    for _ in range(50):
        cache.put("/issues/1", _answer(100_000))
    assert len(cache) == 1 and 100_000 <= cache.retained_bytes < 101_000
    cache.put("/issues/1", _answer(2_000_000))
    assert cache.get("/issues/1") is None and cache.retained_bytes == 0


def test_the_least_recently_read_goes_first() -> None:
    cache: ETagCache[CachedAnswer] = ETagCache(max_bytes=350_000, weigh=CachedAnswer.weight)
    cache.put("a", _answer(100_000))
    cache.put("b", _answer(100_000))
    cache.put("c", _answer(100_000))
    assert cache.get("a") is not None  # read: now the most recent
    cache.put("d", _answer(100_000))
    assert cache.get("b") is None and all(cache.get(key) is not None for key in ("a", "c", "d"))


def test_many_small_answers_hold_no_more_memory_than_the_cap() -> None:
    """The cap bounds what the answers hold in memory, headers and objects included: small
    answers (a dozen headers, a short body) are mostly not body."""
    headers = [(f"x-header-{index}", f"value {index} " * 3) for index in range(12)]
    cache: ETagCache[CachedAnswer] = ETagCache(entries=100_000, max_bytes=1_000_000, weigh=CachedAnswer.weight)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(5_000):
            answer = httpx.Response(200, headers=headers)
            cache.put(f"/repos/acme/widgets/issues/{index}/comments", CachedAnswer.of(f'"{index}"', answer.headers, b"[]" * 100))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.retained_bytes <= 1_000_000
    assert held <= 1_100_000, f"{len(cache)} answers hold {held} bytes"


def _note_page(index: int) -> bytes:
    """A page of GitLab notes as the server sends it (about 30 kB)."""
    author = {"id": 7, "username": "maintainer", "name": "Maintainer", "state": "active", "avatar_url": None}
    notes = [
        {"id": index * 100 + n, "body": f"note {n} of {index}: " + "text " * 20, "author": author,
         "created_at": "2026-11-27T12:00:00.000Z", "updated_at": "2026-11-27T12:00:00.000Z",
         "system": False, "noteable_id": index, "noteable_type": "MergeRequest", "noteable_iid": index,
         "resolvable": False, "confidential": False, "internal": False}
        for n in range(50)
    ]
    return json.dumps(notes).encode()


def test_parsed_json_is_weighed_as_what_it_holds_in_memory() -> None:
    """A cache of parsed answers (GitLab's pages and notes) is bounded by what the parsed
    objects hold: several times the bytes received."""
    for raw in (_note_page(1), b'{"id": 1, "labels": ["a", "b"], "assignee": null, "n": 1.5, "ok": true}'):
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            value = json.loads(raw)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert 0.8 * held <= json_weight(value) <= 1.25 * held + 128, (held, json_weight(value))


def test_many_parsed_pages_hold_no_more_memory_than_the_cap() -> None:
    cache: ETagCache[Any] = ETagCache(entries=100_000, max_bytes=1_000_000, weigh=json_weight)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(300):
            cache.put(f"/projects/1/merge_requests/{index}/notes", json.loads(_note_page(index)))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.retained_bytes <= 1_000_000
    assert held <= 1_100_000, f"{len(cache)} pages hold {held} bytes"


def test_an_answer_keeps_its_headers_as_received() -> None:
    headers = httpx.Headers(
        [("Link", '<https://x/?page=2>; rel="next"'), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("X-Empty", ""), ("ETag", 'W/"1: 2"')]
    )
    kept = CachedAnswer.of('W/"1: 2"', headers, b"{}").headers()
    assert kept.multi_items() == headers.multi_items()
    assert kept.get_list("set-cookie") == ["a=1", "b=2"] and kept["link"] == '<https://x/?page=2>; rel="next"'
    assert CachedAnswer.of('"e"', httpx.Headers(), b"").headers().multi_items() == []
