"""An unknown option names the one the user most likely meant (issue 33, G4): by meaning, for
the names other tools give the same setting (`--world` is `--nproc`), and by spelling, for a
typo (`--szes`). One line, exit 2; no suggestion rather than a far one."""

from __future__ import annotations

import sys

import pytest
import typer

from commbench.cli import app, main
from commbench.cli._suggest import _SAME_THING, nearest_option


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit) as exit_info:
        patch.setattr(sys, "argv", ["commbench", *args])
        main()
    out, err = capsys.readouterr()
    assert out == ""
    code = exit_info.value.code
    return (code if isinstance(code, int) else 0), err


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        # what other tools call it
        (["collectives", "--world", "2"], "--nproc"),
        (["collectives", "--world-size=2"], "--nproc"),
        (["collectives", "--nproc-per-node", "2"], "--nproc"),
        (["collectives", "--np", "2"], "--nproc"),
        (["collectives", "-g", "2"], "--nproc"),
        (["replay", "trace", "--world-size", "4"], "--world"),  # replay has its own --world
        (["model", "--nproc", "8"], "--world"),
        (["collectives", "--master-addr", "h:1"], "--rdzv-endpoint"),
        (["collectives", "--num-nodes", "2"], "--nnodes"),
        (["slurm-script", "--nnodes", "2"], "--nodes"),
        (["k8s-manifest", "--image", "i", "--gpus", "4"], "--gpus-per-node"),
        (["collectives", "--iterations", "5"], "--iters"),
        (["collectives", "-w", "5"], "--warmup"),  # nccl-tests' -w
        (["collectives", "-b", "8"], "--sizes"),  # nccl-tests' -b (minbytes)
        (["collectives", "--datatype", "float16"], "--dtype"),
        (["collectives", "--output", "dir"], "--out"),
        (["model", "--bandwidth", "100"], "--bw"),
        (["p2p", "--source", "0"], "--src"),
        (["p2p", "--sizes", "1M"], "--size"),
        (["compare", "a", "b", "--threshold", "5%"], "--tolerance"),
        # a typo
        (["collectives", "--szes", "1K"], "--sizes"),
        (["collectives", "--warmpu", "1"], "--warmup"),
        (["collectives", "--in-plac"], "--in-place"),
        (["collectives", "--min_time", "1"], "--min-time"),
        (["collectives", "--rank", "0"], "--ranks"),  # its own option before another tool's
        (["--verison"], "--version"),
        (["compare", "a", "b", "--tolerence", "5%"], "--tolerance"),
        # a typo of another tool's name
        (["collectives", "--wrld", "2"], "--nproc"),
        # nothing near: no guess
        (["collectives", "--bogus"], None),
        (["collectives", "-x"], None),
        (["topo", "--frobnicate"], None),
    ],
)
def test_an_unknown_option_names_the_one_meant(
    capsys: pytest.CaptureFixture[str], args: list[str], meant: str | None
) -> None:
    code, err = run_main(capsys, *args)
    typed = [a for a in args if a.startswith("-")][-1].split("=")[0]
    command = " ".join(a for a in args[:1] if not a.startswith("-"))
    see = f"(see 'commbench{' ' + command if command else ''} --help'"
    hint = f"; did you mean {meant}?" if meant else ""
    assert code == 2
    assert err.startswith(f"commbench: error: No such option: {typed}{hint} {see}")
    assert err.endswith(")\n") and len(err.splitlines()) == 1


def test_the_wrapped_command_of_a_job_gets_the_suggestion_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = run_main(capsys, "slurm-script", "--", "collectives", "--world", "2")
    assert code == 2
    assert "the wrapped command: No such option: --world; did you mean --nproc?" in err
    assert len(err.splitlines()) == 1


def _every_option() -> set[str]:
    found: set[str] = set()

    def walk(command: typer.core.TyperGroup) -> None:
        for sub in getattr(command, "commands", {}).values():
            walk(sub)
        found.update(
            name
            for param in command.params
            if param.param_type_name == "option"
            for name in (*param.opts, *param.secondary_opts)
        )

    walk(typer.main.get_group(app))
    return found


def test_every_name_offered_is_an_option_of_commbench() -> None:
    """A renamed option leaves no stale suggestion behind."""
    offered = {target for targets, _ in _SAME_THING for target in targets}
    assert offered <= _every_option(), offered - _every_option()


def test_a_name_a_command_has_is_never_suggested_in_its_place() -> None:
    """Another tool's name that is also this command's own option is not an unknown option:
    the table only speaks when the command lacks it."""
    assert nearest_option("--world", ["--world", "--nproc"]) == "--world"
    assert nearest_option("--sizes", ["--size"]) == "--size"
    assert nearest_option("-N", ["-n", "--nproc", "--nnodes"]) == "--nnodes"
