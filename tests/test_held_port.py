"""conftest's `hold_port`: a port chosen for a test's rendezvous stays that test's until it ends.

A port that is only picked free and let go can be taken by anything before the rendezvous
binds it; a held one cannot, and the rendezvous store can still listen on it.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

HoldPort = Callable[..., AbstractContextManager[int]]


def bind(port: int, host: str = "", reuse: bool = False) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def test_no_one_else_can_bind_a_held_port(hold_port: HoldPort) -> None:
    with hold_port() as port:
        for host in ("", "127.0.0.1"):
            with pytest.raises(OSError):
                bind(port, host)
        # nor does the kernel hand it out when asked for any free port
        taken = [bind(0) for _ in range(300)]
        try:
            assert port not in {s.getsockname()[1] for s in taken}
        finally:
            for s in taken:
                s.close()
    bind(port).close()  # and it is free again after the block


def test_the_rendezvous_store_listens_on_a_held_port(hold_port: HoldPort) -> None:
    from torch.distributed import TCPStore

    timeout = datetime.timedelta(seconds=30)
    with hold_port() as port:
        server = TCPStore("127.0.0.1", port, is_master=True, timeout=timeout)
        server.set("k", "v")
        client = TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
        assert client.get("k") == b"v"
        # a second would-be server on the same host fails to bind, as torchrun's c10d
        # rendezvous expects before it falls back to being a client
        with pytest.raises((RuntimeError, OSError)):
            TCPStore("127.0.0.1", port, is_master=True, timeout=timeout)
        del client, server


def test_a_range_gives_a_port_in_it_and_says_when_none_is_left(hold_port: HoldPort) -> None:
    with hold_port(20000, 32000) as port:
        assert 20000 <= port < 32000
        with pytest.raises(RuntimeError, match="no free TCP port"), hold_port(port, port + 1):
            pass


def test_a_held_run_of_ports_is_found_when_the_kernels_choices_have_busy_neighbours(
    hold_port: HoldPort, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded machine: connect() fills the even ports with TIME_WAIT and bind(0) gives odd
    ones, so the port after the kernel's choice was taken 64 times in a row ("no free TCP port
    in 0..-1"). Here every port the kernel picks has both neighbours taken: a run of two is
    still held, each port of it bound by nobody else."""
    blockers: list[socket.socket] = []
    real_bind = socket.socket.bind

    def adversarial(sock: socket.socket, address: object) -> None:
        real_bind(sock, address)
        if isinstance(address, tuple) and address[1] == 0:
            chosen = sock.getsockname()[1]
            for neighbour in (chosen - 1, chosen + 1):
                try:
                    blocker = socket.socket()
                    real_bind(blocker, ("", neighbour))
                    blockers.append(blocker)
                except OSError:
                    blocker.close()  # taken already: as adversarial as can be

    monkeypatch.setattr(socket.socket, "bind", adversarial)
    try:
        for _ in range(5):
            with hold_port(span=2) as port:
                for k in (0, 1):
                    with pytest.raises(OSError):
                        bind(port + k)  # a port of its own: bound as it is
    finally:
        monkeypatch.undo()
        for blocker in blockers:
            blocker.close()


def test_no_free_run_says_which_ports_were_tried(hold_port: HoldPort) -> None:
    # port and port + 1 are held: neither port..port+1 nor port+1..port+2 is free
    with (
        hold_port(20000, 32000, span=2) as port,
        pytest.raises(RuntimeError) as err,
        hold_port(port, port + 3, span=2),
    ):
        pass
    assert str(err.value) == (
        f"no free TCP port with the 1 after it in {port}..{port + 2}: "
        "tried all 2, each taken by another socket"
    )
