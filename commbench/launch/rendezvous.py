"""Which node hosts the c10d rendezvous store, where torchrun would guess wrong.

torchrun's c10d rendezvous hosts its TCP store in the agent it guesses runs on the endpoint's
machine (`_matches_machine_hostname`, torch/distributed/elastic/rendezvous/utils.py): the
endpoint is `localhost`, a loopback address, this host name, or shares an address with what
this host name resolves to. A node whose endpoint is the address of a second NIC, a network
namespace or a container, while its host name resolves elsewhere (to 127.0.1.1, as Debian
writes /etc/hosts, or to the first NIC), is guessed a client: no agent hosts the store, and
every node fails with `RendezvousConnectionError` once its connection attempts time out.

commbench can tell for sure: the endpoint is this machine's when a socket binds to it. Then
node rank 0 passes `--rdzv-conf is_host=1`, and only where torch's guess misses. An explicit
`is_host` turns off torch's fallback (a guessed host that cannot bind the port, because
another agent on this machine bound it first, connects as a client instead), and that
fallback is what lets several nodes on one machine share a loopback endpoint; were rank 0 to
insist there, whichever agent started first would host and rank 0 would fail. Where torch's
guess misses on rank 0's machine it misses for every node there, so rank 0 is the only
claimant.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from pathlib import Path

# Where these read 1, any address binds, local or not, and a bind proves nothing.
NONLOCAL_BIND = {
    socket.AF_INET: Path("/proc/sys/net/ipv4/ip_nonlocal_bind"),
    socket.AF_INET6: Path("/proc/sys/net/ipv6/ip_nonlocal_bind"),
}


def endpoint_host(endpoint: str) -> str:
    """The host of HOST:PORT, an IPv6 address without its brackets (as torchrun reads it)."""
    host = endpoint.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _addresses(host: str, **hints: int) -> list[tuple[socket.AddressFamily, tuple]]:
    """(family, sockaddr) of each address `host` resolves to; none when it does not."""
    try:
        infos = socket.getaddrinfo(host, None, **hints)
    except (OSError, UnicodeError):
        return []
    return [(family, sockaddr) for family, _, _, _, sockaddr in infos]


def _any_address_binds(family: socket.AddressFamily) -> bool:
    try:
        return NONLOCAL_BIND[family].read_text().strip() == "1"
    except (KeyError, OSError):
        return False


def is_local_address(host: str) -> bool:
    """Whether `host` (an address, or a name resolving to one) is an address of this machine's
    own interfaces, as this process's network namespace has them.

    The kernel lets a socket bind only to a local address, so a bind on port 0 is the test:
    it reads no interface list, and holds for a second NIC, a namespace's veth and 127.0.0.1
    alike. Where every address binds (net.ipv4.ip_nonlocal_bind), it answers False: unknown,
    so the caller leaves torchrun to its own guess."""
    for family, sockaddr in _addresses(host, type=socket.SOCK_STREAM):
        if family not in NONLOCAL_BIND or _any_address_binds(family):
            continue
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((sockaddr[0], 0, *sockaddr[2:]))  # an IPv6 scope id travels along
        except OSError:
            continue
        return True
    return False


def torch_guesses_host(host: str) -> bool:
    """torchrun's own guess whether this machine hosts the store for endpoint `host`.

    A copy of torch's `_matches_machine_hostname` (as of torch 2.13; a test holds the two
    together) rather than an import of it: importing torch would cost the
    launcher 1.5 s on every multi-node run. Where this host name does not resolve, torch's
    guess raises; that is a miss here, and commbench's explicit `is_host` spares torch the
    guess."""
    if host == "localhost":
        return True
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return True
    this_host = socket.gethostname()
    if host == this_host:
        return True
    host_ips = {sockaddr[0] for _, sockaddr in _addresses(host, proto=socket.IPPROTO_TCP)}
    try:
        mine = socket.getaddrinfo(
            this_host, None, proto=socket.IPPROTO_TCP, flags=socket.AI_CANONNAME
        )
    except (OSError, UnicodeError):
        return False
    return any(
        (canonname and canonname == host) or sockaddr[0] == host or sockaddr[0] in host_ips
        for _, _, _, canonname, sockaddr in mine
    )


def host_store_args(endpoint: str, node_rank: int) -> list[str]:
    """torchrun arguments that make node rank 0 host the store where torchrun would not guess
    it does, though the endpoint is an address of this machine; none otherwise."""
    host = endpoint_host(endpoint)
    if node_rank == 0 and not torch_guesses_host(host) and is_local_address(host):
        return ["--rdzv-conf", "is_host=1"]
    return []
