"""The dashboard acts only for its own origin (SPEC 15), over real HTTP to its uvicorn
server, with no token in force (bound to localhost, the default): a state-changing call
takes JSON only and refuses a foreign `Origin` or a cross-site `Sec-Fetch-Site`; every
route answers only to a `Host` it serves, so DNS rebinding reads nothing; the webhooks
answer any `Host`, since each delivery carries its own signature."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest

from coding_agent.config import parse_config
from coding_agent.errors import ConfigError
from coding_agent.store.state import StateStore
from coding_agent.web.server import serving_dashboard
from tests.integration.test_operator_dashboard import KEY, make_config, seed

STOP = f"/api/tasks/{quote(KEY, safe='')}/stop"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, StateStore]]:
    config, hidden = make_config(tmp_path)
    store = StateStore(config.database.url)
    seed(store, hidden[0])
    async with serving_dashboard(config, store) as url:
        assert url is not None
        yield url, store
    store.close()


async def test_a_form_or_text_body_is_415_and_stops_nothing(served: tuple[str, StateStore]) -> None:
    url, store = served
    async with httpx.AsyncClient(base_url=url) as client:
        form = await client.post(STOP, data={"confirm": "1"})
        text = await client.post(STOP, content=b'{"a": 1}', headers={"Content-Type": "text/plain"})
        bare = await client.post(STOP)
    assert [form.status_code, text.status_code, bare.status_code] == [415, 415, 415]
    assert "Content-Type: application/json" in form.json()["error"]
    assert store.steering.control_request(KEY) is None


async def test_a_body_labelled_json_that_is_not_is_400(served: tuple[str, StateStore]) -> None:
    url, store = served
    async with httpx.AsyncClient(base_url=url) as client:
        refused = await client.post(STOP, content=b"confirm=1", headers={"Content-Type": "application/json"})
    assert refused.status_code == 400 and refused.json() == {"error": "the request body is not JSON"}
    assert store.steering.control_request(KEY) is None


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # another port of localhost is the same site
        {"Origin": "null"},
    ],
    ids=["foreign-origin", "cross-site", "same-site", "null-origin"],
)
async def test_a_state_change_from_elsewhere_is_403_and_stops_nothing(
    served: tuple[str, StateStore], headers: dict[str, str]
) -> None:
    url, store = served
    async with httpx.AsyncClient(base_url=url) as client:
        refused = await client.post(STOP, json={}, headers=headers)
    assert refused.status_code == 403, refused.text
    assert "refused" in refused.json()["error"]
    assert store.steering.control_request(KEY) is None


async def test_another_port_of_the_same_host_is_a_foreign_origin(served: tuple[str, StateStore]) -> None:
    """Another port of the same host is another origin: `Origin` names the port too."""
    url, store = served
    other_port = urlsplit(url).port + 1  # type: ignore[operator]
    async with httpx.AsyncClient(base_url=url) as client:
        refused = await client.post(STOP, json={}, headers={"Origin": f"http://127.0.0.1:{other_port}"})
    assert refused.status_code == 403 and store.steering.control_request(KEY) is None


async def test_the_dashboards_own_origin_and_scripts_may_act(served: tuple[str, StateStore]) -> None:
    url, store = served
    async with httpx.AsyncClient(base_url=url) as client:
        browser = await client.post(
            f"/api/tasks/{quote(KEY, safe='')}/pause",
            json={},
            headers={"Origin": url, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json; charset=utf-8"},
        )
        assert browser.status_code == 200 and store.steering.control_request(KEY) == "pause"
        script = await client.post(STOP, json={})  # curl and friends send neither header
    assert script.status_code == 200 and store.steering.control_request(KEY) == "stop"


@pytest.mark.parametrize("path", ["/api/tasks", "/", f"/tasks/{quote(KEY, safe='')}", "/metrics", "/healthz"])
async def test_a_rebinding_host_is_421_on_every_route(served: tuple[str, StateStore], path: str) -> None:
    url, _ = served
    port = urlsplit(url).port
    async with httpx.AsyncClient(base_url=url) as client:
        rebound = await client.get(path, headers={"Host": f"attacker.example:{port}"})
    assert rebound.status_code == 421 and KEY not in rebound.text
    assert "attacker.example" in rebound.text and "dashboard.public_url" in rebound.text
    assert len(rebound.text.splitlines()) == 1


async def test_only_the_hosts_it_serves_are_answered(served: tuple[str, StateStore]) -> None:
    url, store = served
    port = urlsplit(url).port
    async with httpx.AsyncClient(base_url=url) as client:

        async def status(host: str) -> int:
            return (await client.get("/api/tasks", headers={"Host": host})).status_code

        served_hosts = [await status(host) for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", "localhost.", "127.0.0.1")]
        foreign = [await status(host) for host in ("127.0.0.1.nip.io", "[::2]:80", "10.0.0.1", "localhost.attacker.example")]
        malformed = [await status(host) for host in ("evil@127.0.0.1", "127.0.0.1:80:80", "", "[::1")]
        stop = await client.post(STOP, json={}, headers={"Host": "attacker.example"})
    assert served_hosts == [200] * 5
    assert foreign == [421] * 4
    assert malformed == [400] * 4
    assert stop.status_code == 421 and store.steering.control_request(KEY) is None


async def test_an_ipv6_loopback_bind_answers_its_bracketed_host(tmp_path: Path) -> None:
    config, hidden = make_config(tmp_path, bind="[::1]:0")
    store = StateStore(config.database.url)
    seed(store, hidden[0])
    async with serving_dashboard(config, store) as url, httpx.AsyncClient(base_url=str(url)) as client:
        assert url is not None and url.startswith("http://[::1]:")
        own = await client.get("/api/tasks")
        acted = await client.post(f"/api/tasks/{quote(KEY, safe='')}/pause", json={}, headers={"Origin": url})
        other = await client.get("/api/tasks", headers={"Host": f"[::2]:{urlsplit(url).port}"})
    store.close()
    assert own.status_code == 200 and acted.status_code == 200 and store.steering.control_request(KEY) == "pause"
    assert other.status_code == 421


async def test_public_url_names_a_host_and_an_origin_it_serves(tmp_path: Path) -> None:
    """Behind a TLS proxy at https://agent.example.com (which passes the Host on)."""
    config, hidden = make_config(tmp_path, public_url="https://Agent.example.com:443/")
    assert config.dashboard.public_url == "https://agent.example.com" and not config.dashboard.local_only
    store = StateStore(config.database.url)
    seed(store, hidden[0])
    bearer = {"Authorization": f"Bearer {hidden[2]}"}
    async with serving_dashboard(config, store) as url, httpx.AsyncClient(base_url=str(url)) as client:
        proxied = {**bearer, "Host": "agent.example.com", "Origin": "https://agent.example.com"}
        tokenless = await client.get("/api/tasks", headers={"Host": "agent.example.com"})
        listed = await client.get("/api/tasks", headers=proxied)
        acted = await client.post(f"/api/tasks/{quote(KEY, safe='')}/pause", json={}, headers=proxied)
        elsewhere = await client.post(STOP, json={}, headers={**proxied, "Origin": "https://evil.example"})
        rebound = await client.get("/api/tasks", headers={**bearer, "Host": "attacker.example"})
    store.close()
    assert tokenless.status_code == 401  # reachable beyond localhost: the token is in force
    assert listed.status_code == 200 and acted.status_code == 200 and store.steering.control_request(KEY) == "pause"
    assert elsewhere.status_code == 403 and rebound.status_code == 421


async def test_a_wildcard_bind_answers_loopback_names_and_says_to_set_public_url(tmp_path: Path) -> None:
    config, hidden = make_config(tmp_path, bind="0.0.0.0:0")
    store = StateStore(config.database.url)
    async with serving_dashboard(config, store) as url:
        assert url is not None
        local = url.replace("0.0.0.0", "127.0.0.1")
        async with httpx.AsyncClient(base_url=local, headers={"Authorization": f"Bearer {hidden[2]}"}) as client:
            loopback = await client.get("/api/tasks")
            by_address = await client.get("/api/tasks", headers={"Host": f"192.0.2.7:{urlsplit(url).port}"})
        async with httpx.AsyncClient(base_url=local) as browser:  # the login form, a form post
            foreign_login = await browser.post("/login", data={"token": hidden[2]}, headers={"Origin": "http://evil.example"})
            own_login = await browser.post("/login", data={"token": hidden[2]}, headers={"Origin": local})
    store.close()
    assert loopback.status_code == 200
    assert foreign_login.status_code == 403 and own_login.status_code == 303
    assert by_address.status_code == 421 and "dashboard.public_url" in by_address.json()["error"]


@pytest.mark.parametrize(
    ("public_url", "message"),
    [
        ("agent.example.com", "http(s) URL"),
        ("ftp://agent.example.com", "http(s) URL"),
        ("https://user@agent.example.com", "http(s) URL"),
        ("https://agent.example.com:99999", "port"),
        ("https://agent.example.com/dashboard", "without a path"),
    ],
)
def test_a_bad_public_url_is_a_config_error(tmp_path: Path, public_url: str, message: str) -> None:
    with pytest.raises(ConfigError, match="dashboard.public_url") as error:
        make_config(tmp_path, public_url=public_url)
    assert message in str(error.value)


def test_a_public_url_beyond_localhost_needs_the_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dashboard.public_url https://agent.example.com is beyond localhost"):
        make_config(tmp_path, public_url="https://agent.example.com", token=None)
    config, _ = make_config(tmp_path, public_url="http://localhost:9000", token=None)  # a published port
    assert config.dashboard.local_only


async def test_webhooks_answer_any_host(tmp_path: Path) -> None:
    """A forge delivers to the name it was given: the Host rules do not apply, the
    signature does (an unsigned delivery reaches the signature check, not the Host check)."""
    from coding_agent.runtime.service import AgentService
    from coding_agent.web.server import bind_socket, serving_http

    data: dict[str, Any] = {
        "task_source": "github",
        "github": {"owner": "acme", "token": "t"},
        "llm": {"provider": "openai", "openai": {"model": "m", "api_key": "k"}},
        "database": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
        "context_storage": {"base_dir": str(tmp_path / "contexts")},
        "webhooks": {"github_secret": "whsec-" + "5f1e0c9a7b3d2468"},
    }
    config = parse_config(data, env={})
    service = AgentService(config)
    try:
        async with serving_http(config, service, bind_socket("127.0.0.1", 0)) as url:
            async with httpx.AsyncClient(base_url=str(url)) as client:
                delivery = await client.post(
                    "/webhooks/github",
                    content=b"{}",
                    headers={"Host": "agent.example.com", "X-GitHub-Event": "ping", "Content-Type": "application/json"},
                )
                dashboard = await client.get("/api/tasks", headers={"Host": "agent.example.com"})
    finally:
        await service.aclose()
    assert delivery.status_code == 401
    assert dashboard.status_code == 421
