"""The sign-in before a multi-node diagnosis (`commbench.diagnose.muster`): node rank 0 keeps
its store on the rendezvous port + 1, and says so in one line when it cannot, instead of
going on as if nobody had come (which once made three nodes disagree on who came)."""

from __future__ import annotations

import socket

import pytest

from commbench.diagnose.muster import MAX_PORT, muster
from commbench.errors import UserError
from commbench.launch.launcher import LaunchOptions


def _listening() -> tuple[socket.socket, int]:
    """A socket listening on a port whose predecessor is free too: (the socket, port - 1)."""
    for _ in range(50):
        sock = socket.socket()
        sock.bind(("", 0))
        port = sock.getsockname()[1]
        with socket.socket() as probe:
            try:
                probe.bind(("", port - 1))
            except OSError:
                sock.close()
                continue
        sock.listen()
        return sock, port - 1
    raise RuntimeError("no two free ports in a row")


def test_node_rank_0_says_that_its_sign_in_port_is_taken() -> None:
    taken, rdzv = _listening()
    with taken:
        launch = LaunchOptions(nnodes=2, node_rank=0, rdzv_endpoint=f"127.0.0.1:{rdzv}")
        with pytest.raises(UserError) as err:
            muster(launch, wait=1.0)
    text = str(err.value)
    assert f"127.0.0.1:{rdzv + 1}" in text and "rendezvous port + 1" in text
    assert "in use" in text and "\n" not in text


def test_the_last_port_leaves_no_room_for_the_sign_in() -> None:
    launch = LaunchOptions(nnodes=2, node_rank=1, rdzv_endpoint=f"127.0.0.1:{MAX_PORT}")
    with pytest.raises(UserError, match="choose a lower one"):
        muster(launch, wait=0.1)
