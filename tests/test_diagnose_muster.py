"""The sign-in before a multi-node diagnosis (`commbench.diagnose.muster`): node rank 0 keeps
its store on the rendezvous port + 1, and says so in one line when it cannot, instead of
going on as if nobody had come (which once made three nodes disagree on who came)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from commbench.diagnose.muster import MAX_PORT, muster
from commbench.errors import UserError
from commbench.launch.launcher import LaunchOptions

HoldPort = Callable[..., AbstractContextManager[int]]


def _listening(port: int) -> socket.socket:
    """A socket listening on `port`, one of a run `hold_port` holds (each bound without
    listening, SO_REUSEADDR set once bound, so a listener with it may join them)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("", port))
    sock.listen()
    return sock


def test_node_rank_0_says_that_its_sign_in_port_is_taken(hold_port: HoldPort) -> None:
    """Its two ports were once the kernel's choice for port 0 and the one before it: on a
    busy machine, the one before was in TIME_WAIT 50 times in a row (bind(0) gives odd ports,
    connect() fills the even ones), and the test failed before it began. `hold_port` draws
    both from ports the kernel never hands out, and keeps them."""
    with hold_port(span=2) as rdzv, _listening(rdzv + 1):
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
