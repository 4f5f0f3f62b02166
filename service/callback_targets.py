"""Where a callback may be POSTed (against SSRF): a global address, or one in the allowed networks."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]

_LOCAL_NAMES = ("localhost", "localhost.localdomain")


class CallbackRefused(Exception):
    """The callback URL leads only to addresses callbacks may not reach."""


def parse_networks(text: str | None) -> tuple[Network, ...]:
    """``"10.0.0.0/8, 127.0.0.1"`` -> networks; ValueError naming an entry that is not one."""
    networks = []
    for entry in (text or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"LETHE_CALLBACK_ALLOWED_NETWORKS: {entry!r} is not a network; write CIDR blocks or addresses "
                "separated by commas, for example 10.0.0.0/8,127.0.0.1"
            ) from None
    return tuple(networks)


def address_allowed(address: Address, allowed: Sequence[Network]) -> bool:
    """Globally reachable (not multicast) or in ``allowed``; IPv4-mapped IPv6 judged as IPv4."""
    forms: list[Address] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        forms.insert(0, address.ipv4_mapped)
    if any(form in network for form in forms for network in allowed):
        return True
    return forms[0].is_global and not forms[0].is_multicast


def literal_problem(url: str, allowed: Sequence[Network]) -> str | None:
    """Why the URL is refused if its host is an address callbacks may not reach (names: None)."""
    host = httpx.URL(url).host
    if host.lower().rstrip(".") in _LOCAL_NAMES or host.lower().endswith(".localhost"):
        addresses: list[Address] = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    else:
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            return None  # a name: checked when the callback is delivered
    if any(address_allowed(a, allowed) for a in addresses):
        return None
    return (
        f"callback_url {url!r} points at {host}, a loopback, private or reserved address that callbacks may "
        "not reach; use a publicly reachable URL (the operator can allow networks with "
        "LETHE_CALLBACK_ALLOWED_NETWORKS)"
    )


@dataclass(frozen=True)
class Target:
    """The URL with its host replaced by the checked address, plus the Host header and SNI extension."""

    url: str
    headers: dict[str, str]
    extensions: dict[str, Any]


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, in the resolver's order (socket.gaierror when none)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def resolve(url: str, allowed: Sequence[Network], resolver: Resolver | None = None) -> Target:
    """Where to POST ``url``: its host's first allowed address (:class:`CallbackRefused`: none; OSError)."""
    parsed = httpx.URL(url)
    host = parsed.raw_host.decode("ascii").strip("[]")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    found = (resolver or system_resolver)(host, port)
    addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found]  # "fe80::1%eth0": drop the zone
    usable = [a for a in addresses if address_allowed(a, allowed)]
    if not usable:
        shown = ", ".join(str(a) for a in addresses[:4])
        raise CallbackRefused(
            f"{parsed.host} resolves only to addresses callbacks may not reach ({shown}); allow the network "
            "with LETHE_CALLBACK_ALLOWED_NETWORKS if it is meant to receive callbacks"
        )
    extensions: dict[str, Any] = {}
    try:
        ipaddress.ip_address(host)
    except ValueError:
        extensions["sni_hostname"] = host  # TLS: the certificate is checked against the name, not the address
    return Target(
        url=str(parsed.copy_with(host=str(usable[0]))),
        headers={"Host": parsed.netloc.decode("ascii")},
        extensions=extensions,
    )
