"""Where callbacks may go (service.callback_targets): public addresses, and allowed networks only;
and how they are signed (service.jobs.callbacks.sign)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

import pytest

from service.callback_targets import (
    CallbackRefused,
    address_allowed,
    literal_problem,
    parse_networks,
    resolve,
)
from service.jobs.callbacks import sign
from service.settings import Settings

NONE: tuple = ()
LOOPBACK = parse_networks("127.0.0.0/8")


def test_networks_parse_with_bare_addresses_and_spaces() -> None:
    assert parse_networks(" 10.0.0.0/8, 192.168.1.7 ,fd00::/8,") == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("192.168.1.7/32"),
        ipaddress.ip_network("fd00::/8"),
    )
    assert parse_networks(None) == () and parse_networks("") == ()


def test_a_bad_network_is_refused_at_start_up_naming_it() -> None:
    with pytest.raises(ValueError, match="'10.0.0.0/33' is not a network"):
        parse_networks("127.0.0.1,10.0.0.0/33")
    with pytest.raises(ValueError, match="LETHE_CALLBACK_ALLOWED_NETWORKS"):
        Settings(callback_allowed_networks="intranet")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",  # loopback
        "10.1.2.3",
        "172.16.0.9",
        "192.168.0.1",  # private
        "169.254.169.254",  # link-local: cloud metadata
        "100.64.0.1",  # shared address space (carrier-grade NAT)
        "0.0.0.0",
        "224.0.0.1",  # multicast
        "::1",
        "fd12::1",  # unique local
        "fe80::1",
        "::ffff:127.0.0.1",  # IPv4-mapped: connects to 127.0.0.1
        "::ffff:169.254.169.254",
    ],
)
def test_non_public_addresses_are_refused_unless_allowed(address: str) -> None:
    ip = ipaddress.ip_address(address)
    assert not address_allowed(ip, NONE)
    assert address_allowed(ip, parse_networks(f"{address}"))


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_allowed(ipaddress.ip_address(address), NONE)


def test_an_ipv4_mapped_address_is_judged_by_the_ipv4_networks() -> None:
    assert address_allowed(ipaddress.ip_address("::ffff:127.0.0.5"), LOOPBACK)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/x",
        "http://[::1]/x",
        "https://169.254.169.254/latest/meta-data",
        "http://localhost:8000/hook",
        "http://LOCALHOST./hook",
        "http://api.localhost/hook",
        "http://[::ffff:10.0.0.1]/x",
    ],
)
def test_submission_refuses_literal_internal_hosts(url: str) -> None:
    problem = literal_problem(url, NONE)
    assert problem is not None and "LETHE_CALLBACK_ALLOWED_NETWORKS" in problem


def test_submission_lets_names_and_public_literals_through_and_honours_allowed_networks() -> None:
    assert literal_problem("https://app.example/hooks/lethe", NONE) is None  # resolved at delivery
    assert literal_problem("http://93.184.216.34/x", NONE) is None
    assert literal_problem("http://127.0.0.1:9/x", LOOPBACK) is None
    assert literal_problem("http://localhost:9/x", LOOPBACK) is None  # 127.0.0.1 is allowed


def test_delivery_goes_to_the_checked_address_with_the_original_host() -> None:
    target = resolve("https://hooks.app.example:8443/lethe?x=1", NONE, lambda host, port: ["93.184.216.34"])
    assert target.url == "https://93.184.216.34:8443/lethe?x=1"
    assert target.headers == {"Host": "hooks.app.example:8443"}
    assert target.extensions == {"sni_hostname": "hooks.app.example"}  # TLS checks the name, not the address


def test_delivery_skips_addresses_it_may_not_reach_and_passes_the_default_port() -> None:
    seen: list[tuple[str, int]] = []

    def resolver(host: str, port: int) -> list[str]:
        seen.append((host, port))
        return ["10.0.0.7", "2606:4700::1111"]

    target = resolve("https://hooks.app.example/lethe", NONE, resolver)
    assert seen == [("hooks.app.example", 443)]
    assert target.url == "https://[2606:4700::1111]/lethe" and target.headers == {"Host": "hooks.app.example"}


def test_a_name_that_resolves_only_to_internal_addresses_is_refused() -> None:
    with pytest.raises(CallbackRefused, match=r"resolves only to .*169\.254\.169\.254"):
        resolve(
            "http://metadata.attacker.example/x", NONE, lambda host, port: ["169.254.169.254", "10.0.0.1"]
        )
    # ... unless the operator allowed the network
    target = resolve("http://hook.internal:8080/x", parse_networks("10.0.0.0/8"), lambda h, p: ["10.0.0.1"])
    assert target.url == "http://10.0.0.1:8080/x" and target.headers == {"Host": "hook.internal:8080"}


def test_an_address_literal_gets_no_server_name() -> None:
    target = resolve("http://127.0.0.1:9/x", LOOPBACK, lambda host, port: [host])
    assert target.url == "http://127.0.0.1:9/x" and target.extensions == {}


def test_a_name_that_does_not_resolve_raises_os_error() -> None:
    def nxdomain(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(OSError):
        resolve("https://nowhere.example/x", NONE, nxdomain)


def test_the_signature_is_an_hmac_of_the_timestamp_and_the_exact_body() -> None:
    body = b'{"event":"deletion.completed","request_id":7}'
    header = sign(b"k" * 32, 1_800_000_000, body)
    # HMAC-SHA256 (RFC 2104) of "1800000000." + body under 32 bytes of "k":
    mac = hmac.new(b"k" * 32, b"1800000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1800000000,v1={mac}"
    assert sign(b"k" * 32, 1_800_000_000, body + b" ") != header  # any other byte: another signature
    assert sign(b"j" * 32, 1_800_000_000, body) != header


def test_a_weak_signing_key_is_refused_at_start_up() -> None:
    for weak in ("short", " padded-key-of-enough-length "):
        with pytest.raises(ValueError, match="LETHE_CALLBACK_SIGNING_KEY"):
            Settings(callback_signing_key=weak)
