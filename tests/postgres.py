"""A throwaway PostgreSQL server for a test: Debian's server (`make postgres-deps`), started in a
temporary directory on a free port, removed afterwards, also when the test fails.

The server refuses to run as root, so as root its files belong to the `postgres` user and
every command runs as that user (`runuser -u postgres --`); another user runs them as itself.
It listens on 127.0.0.1 and keeps its socket in its own directory, touching nothing of a
server the machine may already run. Without the server's binaries the test is skipped, except
under CI=true, where it fails (.ci/run installs them).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

SERVER_USER = "postgres"
START_TIMEOUT_S = 60
DATABASE = "commbench"


def server_bin() -> Path | None:
    """The newest installed server's bin directory (Debian: /usr/lib/postgresql/<major>/bin),
    or the one on PATH; None without initdb, pg_ctl and createdb."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    on_path = shutil.which("pg_ctl")
    candidates = [*found, *([Path(on_path).parent] if on_path else [])]
    for directory in candidates:
        if all((directory / tool).is_file() for tool in ("initdb", "pg_ctl", "createdb")):
            return directory
    return None


def need_server() -> Path:
    """The server's bin directory, else skip (fail under CI=true)."""
    directory = server_bin()
    if directory is None:
        reason = "needs Debian's PostgreSQL server (`make postgres-deps`)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + ": .ci/run installs it")
        pytest.skip(reason)
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            pytest.fail(f"the PostgreSQL package made no {SERVER_USER!r} user to run the server as")
    return directory


def _as_server_user(args: list[str]) -> list[str]:
    return ["runuser", "-u", SERVER_USER, "--", *args] if os.geteuid() == 0 else args


def _run(args: list[str]) -> None:
    done = subprocess.run(
        _as_server_user(args), capture_output=True, text=True, timeout=START_TIMEOUT_S
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stdout}{done.stderr}")


@contextmanager
def postgres_server(hold_port: Callable[[], AbstractContextManager[int]]) -> Iterator[str]:
    """A running server with an empty database; yields its URL (no password: trust on its
    own loopback port)."""
    bin_dir = need_server()
    root = Path(tempfile.mkdtemp(prefix="commbench-pg-"))  # short: the socket's path is limited
    data = root / "data"
    started = False
    try:
        if os.geteuid() == 0:
            user = pwd.getpwnam(SERVER_USER)
            os.chown(root, user.pw_uid, user.pw_gid)
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ]
        )
        with hold_port() as port:  # held until the server binds it (it sets SO_REUSEADDR too)
            options = (
                f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off"
            )
            _run(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(root / "server.log"),
                    "-w",
                    "-t",
                    str(START_TIMEOUT_S),
                    "-o",
                    options,
                    "start",
                ]
            )
            started = True
            _run(
                [
                    str(bin_dir / "createdb"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-U",
                    "postgres",
                    DATABASE,
                ]
            )
            yield f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"
    finally:
        if started:
            subprocess.run(
                _as_server_user(
                    [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
                ),
                capture_output=True,
                timeout=START_TIMEOUT_S,
            )
        shutil.rmtree(root, ignore_errors=True)


def rows_in(url: str, table: str) -> int:
    """Rows of one of the history's tables, read by psycopg itself (not through commbench)."""
    import psycopg

    with psycopg.connect(url) as conn:
        (count,) = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone() or (0,)
        return int(count)


def make_database(url: str, name: str) -> str:
    """Another empty database on the same server; its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + f"/{name}"
