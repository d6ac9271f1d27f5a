"""Which hosts the sandbox may reach: the allow-list rules of the egress proxy (SPEC 7.1).

Pure rules (no I/O), in `domain` so that config validation and the proxy share them.
The sandbox has no network of its own; every connection goes through the host proxy,
which asks `AllowList.check` first for the name and port the client asked for, and
again for each address that name resolves to: a listed name that resolves to loopback
or to a cloud metadata address (DNS rebinding) is refused unless the entry names it
exactly as `host:port`.

Entries: `host` (ports 80 and 443), `host:port`, `*.domain` (any subdomain, 80/443),
`*.domain:port`, IPv6 as `[addr]:port`. IP literals are reached only when listed.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = [
    "AllowEntry",
    "AllowList",
    "EgressVerdict",
    "EgressPolicyError",
    "is_special_address",
    "normalize_host",
    "parse_entry",
    "split_host_port",
]

_DEFAULT_PORTS = frozenset({80, 443})
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
# Names that answer with instance credentials on the common clouds; refused like
# link-local addresses whatever they resolve to, unless listed exactly.
_METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)
# Metadata services that do not live in a link-local or loopback range.
_METADATA_ADDRESSES = frozenset(
    {
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
        ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    }
)
_ULA = ipaddress.ip_network("fc00::/7")


class EgressPolicyError(ValueError):
    """An allow-list entry or a requested host that is not a host name or an address."""


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def is_special_address(address: IPAddress) -> bool:
    """Loopback, link-local, unspecified, multicast, unique-local or a metadata address.

    IPv4-mapped IPv6 addresses (`::ffff:127.0.0.1`) are judged by the IPv4 inside.
    """
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in _METADATA_ADDRESSES:
        return True
    if isinstance(address, ipaddress.IPv6Address) and address in _ULA:
        return True
    return address.is_loopback or address.is_link_local or address.is_unspecified or address.is_multicast


def normalize_host(host: str) -> str:
    """Lower-case, no trailing dot, no IPv6 brackets; raise for anything not a host.

    Accepts DNS names (ASCII labels; IDNA names arrive already encoded) and IP literals.
    A NUL, a space, a slash, an `@` or a percent sign (user info, paths, zone ids)
    makes it malformed.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.lower().rstrip(".")
    if not text or len(text) > 253 or "%" in text:
        raise EgressPolicyError(f"malformed host {host[:80]!r}")
    if _ip(text) is not None:
        return str(_ip(text))
    labels = text.split(".")
    if not all(_LABEL.match(label) for label in labels):
        raise EgressPolicyError(f"malformed host {host[:80]!r}")
    if labels[-1].isdigit():  # 127.1, 0x7f.1 and friends: numeric shapes that are not IPs
        raise EgressPolicyError(f"malformed host {host[:80]!r}")
    return text


def split_host_port(text: str, default: int | None) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]:port` or a bare IPv6 address -> (host, port or default)."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise EgressPolicyError(f"malformed host {text[:80]!r}")
        rest = text[end + 1 :]
        host = text[: end + 1]
        if rest and not rest.startswith(":"):
            raise EgressPolicyError(f"malformed host {text[:80]!r}")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None  # a bare name, or a bare IPv6 address
    if port_text is None:
        return host, default
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise EgressPolicyError(f"malformed port in {text[:80]!r}")
    return host, int(port_text)


@dataclass(frozen=True)
class AllowEntry:
    """One allow-list entry: a host (or `*.domain`), with a port or the default 80/443."""

    host: str
    port: int | None
    wildcard: bool = False

    @property
    def exact(self) -> bool:
        """Names one host and one port: the only kind that may reach special addresses."""
        return self.port is not None and not self.wildcard

    def matches(self, host: str, port: int) -> bool:
        if self.port is None and port not in _DEFAULT_PORTS:
            return False
        if self.port is not None and port != self.port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        host = f"*.{self.host}" if self.wildcard else self.host
        host = f"[{host}]" if ":" in host else host
        return host if self.port is None else f"{host}:{self.port}"


def parse_entry(text: str) -> AllowEntry:
    """Parse one configured entry; raise `EgressPolicyError` naming it when it is not one."""
    if not isinstance(text, str) or not text.strip():
        raise EgressPolicyError(f"empty allow-list entry {text!r}")
    host, port = split_host_port(text.strip(), None)
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
        if _ip(host.strip("[]")) is not None:
            raise EgressPolicyError(f"a wildcard cannot cover an IP address: {text!r}")
    return AllowEntry(normalize_host(host), port, wildcard)


@dataclass(frozen=True)
class EgressVerdict:
    """The answer for one request: allowed, or refused with the reason shown to the client."""

    allowed: bool
    reason: str = ""
    entry: AllowEntry | None = None


class AllowList:
    """The entries of one phase (setup or run). Empty: nothing is reachable."""

    def __init__(self, entries: list[str] | tuple[str, ...], setting: str) -> None:
        self.setting = setting
        self.entries = tuple(parse_entry(entry) for entry in entries)

    def _entry(self, host: str, port: int) -> AllowEntry | None:
        exact = [entry for entry in self.entries if entry.exact and entry.matches(host, port)]
        if exact:
            return exact[0]
        return next((entry for entry in self.entries if entry.matches(host, port)), None)

    def check(self, host: str, port: int) -> EgressVerdict:
        """The decision for the name (or literal) and port the client asked for."""
        entry = self._entry(host, port)
        if entry is None:
            return EgressVerdict(False, f"{_show(host, port)} is not in {self.setting}")
        address = _ip(host)
        if address is not None and entry.wildcard:
            return EgressVerdict(False, f"IP address {_show(host, port)} is not in {self.setting}")
        special = (address is not None and is_special_address(address)) or host in _METADATA_NAMES
        if special and not entry.exact:
            return EgressVerdict(
                False, f"{_show(host, port)} is a loopback, link-local or metadata address; only an exact "
                f"host:port entry in {self.setting} allows it",
            )
        return EgressVerdict(True, entry=entry)

    def check_resolved(self, decision: EgressVerdict, address: IPAddress, host: str, port: int) -> EgressVerdict:
        """The decision for one address a listed name resolved to (DNS rebinding guard)."""
        if is_special_address(address) and not (decision.entry is not None and decision.entry.exact):
            return EgressVerdict(
                False, f"{_show(host, port)} resolves to {address}, a loopback, link-local or metadata "
                f"address; only an exact host:port entry in {self.setting} allows it",
            )
        return decision


def _show(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
