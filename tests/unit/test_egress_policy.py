"""The egress allow-list rules (SPEC 7.1): what a listed entry lets through, and what never."""

from __future__ import annotations

import ipaddress

import pytest

from coding_agent.domain.egress_policy import AllowList, EgressPolicyError, normalize_host, parse_entry
from coding_agent.tools.egress_sandbox import no_proxy_value


def check(entries: list[str], host: str, port: int) -> bool:
    return AllowList(entries, "security.egress.run_hosts").check(normalize_host(host), port).allowed


def test_empty_list_allows_nothing() -> None:
    decision = AllowList([], "security.egress.run_hosts").check("pypi.org", 443)
    assert not decision.allowed
    assert "security.egress.run_hosts" in decision.reason


def test_host_entry_allows_only_web_ports() -> None:
    assert check(["pypi.org"], "pypi.org", 443)
    assert check(["pypi.org"], "PyPI.org.", 80)
    assert not check(["pypi.org"], "pypi.org", 22)
    assert not check(["pypi.org"], "files.pypi.org", 443)
    assert not check(["pypi.org"], "evilpypi.org", 443)


def test_host_port_and_wildcard_entries() -> None:
    assert check(["registry.example:8443"], "registry.example", 8443)
    assert not check(["registry.example:8443"], "registry.example", 443)
    assert check(["*.pythonhosted.org"], "files.pythonhosted.org", 443)
    assert not check(["*.pythonhosted.org"], "pythonhosted.org", 443)
    assert not check(["*.pythonhosted.org"], "files.pythonhosted.org.evil.com", 443)


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "169.254.169.254", "::1", "fd00:ec2::254", "metadata.google.internal", "100.100.100.200", "0.0.0.0"],
)
def test_special_hosts_need_an_exact_entry(host: str) -> None:
    port = 80
    shown = f"[{host}]" if ":" in host else host
    assert not check([], host, port)
    if ":" not in host:
        assert not check([host], host, port)  # listed without a port: still refused
    assert check([f"{shown}:{port}"], host, port)


def test_ip_literal_must_be_listed() -> None:
    assert not check(["example.com"], "93.184.215.14", 443)
    assert check(["93.184.215.14"], "93.184.215.14", 443)


def test_listed_name_resolving_to_loopback_is_refused_unless_exact() -> None:
    loose = AllowList(["rebind.example"], "security.egress.setup_hosts")
    first = loose.check("rebind.example", 80)
    assert first.allowed
    resolved = loose.check_resolved(first, ipaddress.ip_address("127.0.0.1"), "rebind.example", 80)
    assert not resolved.allowed and "resolves to 127.0.0.1" in resolved.reason
    mapped = loose.check_resolved(first, ipaddress.ip_address("::ffff:169.254.169.254"), "rebind.example", 80)
    assert not mapped.allowed
    exact = AllowList(["rebind.example:80"], "security.egress.setup_hosts")
    decision = exact.check("rebind.example", 80)
    assert exact.check_resolved(decision, ipaddress.ip_address("127.0.0.1"), "rebind.example", 80).allowed


@pytest.mark.parametrize(
    "host", ["", "exa mple.com", "a/b", "user@host", "-bad.com", "x" * 300, "127.1", "0x7f.1", "host\x00.com", "fe80::1%eth0"]
)
def test_malformed_hosts_raise(host: str) -> None:
    with pytest.raises(EgressPolicyError):
        normalize_host(host)


@pytest.mark.parametrize("entry", ["", "host:0", "host:99999", "host:http", "*.10.0.0.1", "[::1"])
def test_malformed_entries_raise_naming_the_entry(entry: str) -> None:
    with pytest.raises(EgressPolicyError):
        parse_entry(entry)


def test_no_proxy_keeps_the_sandbox_loopback_unless_listed() -> None:
    assert no_proxy_value([]) == "localhost,127.0.0.1,::1"
    assert no_proxy_value(["127.0.0.1:8080", "pypi.org"]) == "localhost,::1"


def test_sandbox_gets_the_socket_read_only_and_the_proxy_variables(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from coding_agent.tools.egress_sandbox import PROXY_PORT, SANDBOX_SOCKET, EgressSandbox, python_path, socat_path

    egress = EgressSandbox(tmp_path / "proxy.sock", "localhost")
    assert egress.binds() == [(str(tmp_path / "proxy.sock"), SANDBOX_SOCKET)]
    env = egress.env()
    assert env["HTTPS_PROXY"] == env["http_proxy"] == f"http://127.0.0.1:{PROXY_PORT}"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost"
    python = egress.command_argv("/bin/bash", "echo 'a b'")
    if python_path() is not None:  # the handoff forwarder: the command's argv untouched after it
        assert python[:3] == [python_path(), "-I", "-S"]
        assert python[-5:] == [SANDBOX_SOCKET, str(PROXY_PORT), "/bin/bash", "-c", "echo 'a b'"]
    socat = EgressSandbox(tmp_path / "proxy.sock", forwarder="socat").command_argv("/bin/bash", "echo 'a b'")
    if socat_path() is not None:
        assert socat[:2] == ["/bin/bash", "-c"]
        assert socat[2].endswith("exec /bin/bash -c 'echo '\"'\"'a b'\"'\"''\n")
