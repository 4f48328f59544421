"""Who hosts the c10d rendezvous store (`commbench.launch.rendezvous`): node rank 0, told so,
where the endpoint is its own address and torchrun's guess would miss it. The case itself,
end to end, is `test_netns_multinode.py`."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from commbench.launch import rendezvous
from commbench.launch.launcher import LaunchOptions, torchrun_command
from commbench.launch.rendezvous import (
    endpoint_host,
    host_store_args,
    is_local_address,
    torch_guesses_host,
)
from tests.factories import collectives_settings

NOT_MINE = "198.51.100.7"  # TEST-NET-2: documentation only, on no machine's interface
HOST_STORE = ["--rdzv-conf", "is_host=1"]


def test_loopback_and_a_name_for_it_are_local() -> None:
    assert is_local_address("127.0.0.1")
    assert is_local_address("localhost")  # a host name, resolved to a local address


def test_an_address_of_no_interface_is_not_local() -> None:
    assert not is_local_address(NOT_MINE)
    assert not is_local_address("no-such-host.invalid")


def test_an_interface_address_is_local() -> None:
    # the address the kernel would send from: one of this machine's own, whatever it is
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((NOT_MINE, 9))  # UDP: picks a route, sends nothing
        except OSError:
            pytest.skip("no IPv4 route off this machine")
        mine = sock.getsockname()[0]
    assert is_local_address(mine)


def test_where_any_address_binds_nothing_is_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysctl = tmp_path / "ip_nonlocal_bind"
    sysctl.write_text("1\n")
    monkeypatch.setitem(rendezvous.NONLOCAL_BIND, socket.AF_INET, sysctl)
    assert not is_local_address("127.0.0.1")


def test_endpoint_host_reads_the_endpoint_as_torchrun_does() -> None:
    assert endpoint_host("10.0.0.1:29500") == "10.0.0.1"
    assert endpoint_host("node-a.example:29500") == "node-a.example"
    assert endpoint_host("[::1]:29500") == "::1"


def test_the_copy_of_torchs_guess_agrees_with_torch() -> None:
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

    me = socket.gethostname()
    hosts = ["localhost", "127.0.0.1", "::1", me, NOT_MINE]
    hosts += sorted({info[4][0] for info in socket.getaddrinfo(me, None)})
    for host in hosts:
        assert torch_guesses_host(host) == _matches_machine_hostname(host), host


def test_rank_0_hosts_where_torch_would_not_guess_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # an address of this machine that the host name does not resolve to: a second NIC
    monkeypatch.setattr(rendezvous, "torch_guesses_host", lambda host: False)
    assert host_store_args("127.0.0.1:29500", 0) == HOST_STORE
    # the other nodes never claim it: two explicit claims on one machine, and the second fails
    assert host_store_args("127.0.0.1:29500", 1) == []
    assert host_store_args(f"{NOT_MINE}:29500", 0) == []  # not ours: not ours to host


def test_where_torch_guesses_right_it_is_left_to_guess() -> None:
    # several nodes on one machine rely on torch's fallback: a guessed host that finds the
    # port taken by another node's agent becomes a client; an explicit is_host would fail
    assert torch_guesses_host("127.0.0.1")
    assert host_store_args("127.0.0.1:29500", 0) == []


def test_torchrun_is_told_only_on_rank_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(rendezvous, "torch_guesses_host", lambda host: False)
    settings = collectives_settings(
        ops=["all_reduce"], sizes=[4096], nproc=1, backend="gloo", device="cpu"
    )

    def command(rank: int) -> list[str]:
        launch = LaunchOptions(nnodes=2, node_rank=rank, rdzv_endpoint="127.0.0.1:29500")
        return torchrun_command(tmp_path, settings, launch)

    rank0 = command(0)
    assert rank0[rank0.index("--rdzv-conf") + 1] == "is_host=1"
    assert rank0.index("--rdzv-conf") < rank0.index("commbench.launch.worker")
    assert "--rdzv-conf" not in command(1)
    assert "--rdzv-conf" not in torchrun_command(tmp_path, settings, LaunchOptions())
