"""commbench: how fast do my GPUs talk to each other, and did that just get worse?

The Python API is verbs, one per command, each returning data and printing nothing:

    import commbench
    run = commbench.run_collectives(ops="all_reduce", sizes="1K-64K", nproc=2, device="cpu")
    run.status, run.path, run.to_frame()
    gate = commbench.compare_runs(commbench.load_run("results/baseline"), run)
    gate.passed, gate.exit_code, gate.to_frame()

Keyword names are the command's flags in snake_case, with the same defaults and checks (bad
input raises `commbench.errors.UserError` carrying the line the command prints). The verbs
live in `commbench.api` (`slurm_script` and `k8s_manifest`, which parse a command line by the
command line's own grammar, in `commbench.cli.slurm` and `commbench.cli.k8s`) and are loaded
on first use, so `import commbench` (and `commbench --help`) pulls in neither torch nor pandas
nor matplotlib.

The names of commbench's packages (`commbench.collectives`, `commbench.p2p`, ...) are
packages and nothing else: the verbs have names of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench.version import VERSION as __version__

_VERBS = {
    "compare_runs": "commbench.api",
    "export_run": "commbench.api",
    "history_add": "commbench.api",
    "history_changes": "commbench.api",
    "history_list": "commbench.api",
    "history_plot": "commbench.api",
    "history_show": "commbench.api",
    "import_nccl_tests": "commbench.api",
    "k8s_manifest": "commbench.cli.k8s",
    "load_run": "commbench.api",
    "load_topology": "commbench.api",
    "model_strategies": "commbench.api",
    "plot_run": "commbench.api",
    "record_job": "commbench.api",
    "replay_trace": "commbench.api",
    "report_run": "commbench.api",
    "run_collectives": "commbench.api",
    "run_diagnose": "commbench.api",
    "run_p2p": "commbench.api",
    "run_suite": "commbench.api",
    "settle_runs": "commbench.api",
    "slurm_script": "commbench.cli.slurm",
}
"""Each verb of the API and the module it lives in."""

__all__ = ["__version__", *_VERBS]

# The verbs for a type checker, which reads neither _VERBS nor __getattr__ (F401: a linter
# cannot see that __all__, built from _VERBS, exports them).
if TYPE_CHECKING:
    from commbench.api import (  # noqa: F401
        compare_runs,
        export_run,
        history_add,
        history_changes,
        history_list,
        history_plot,
        history_show,
        import_nccl_tests,
        load_run,
        load_topology,
        model_strategies,
        plot_run,
        record_job,
        replay_trace,
        report_run,
        run_collectives,
        run_diagnose,
        run_p2p,
        run_suite,
        settle_runs,
    )
    from commbench.cli.k8s import k8s_manifest  # noqa: F401
    from commbench.cli.slurm import slurm_script  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _VERBS.get(name)
    if module is None:
        raise AttributeError(f"module 'commbench' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
