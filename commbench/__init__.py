"""commbench: how fast do my GPUs talk to each other, and did that just get worse?

The Python API (`commbench.api`, documented in the README) is reachable from here:

    import commbench
    run = commbench.collectives(ops=["all_reduce"], sizes="1K-64K", nproc=2, device="cpu")

Its names are loaded on first use, so `import commbench` (and `commbench --help`) pulls in
neither torch nor pandas nor matplotlib.

Five of the API's names are also the names of commbench's own modules (`collectives`, `p2p`,
`topology`, `compare`, `diagnose`), and Python's import system sets `commbench.<module>` to the module
whenever anything imports it. Rather than rename either, those modules are made callable as
they are attached here (`_Package.__setattr__`): `commbench.collectives` is the package, and
calling it is calling `commbench.api.collectives` (same signature, same checks). Imports such
as `from commbench.collectives.settings import X`, and patching by dotted name, work as ever.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "collectives",
    "compare",
    "diagnose",
    "load",
    "p2p",
    "run_suite",
    "topology",
]

_FUNCTIONS = frozenset({"load", "run_suite"})  # `diagnose` is a package: see below
_MODULES = frozenset({"collectives", "compare", "diagnose", "p2p", "topology"})
"""API names that are also modules of commbench: the module, made callable, is the name."""

if TYPE_CHECKING:
    from commbench.api import collectives, compare, diagnose, load, p2p, run_suite, topology


def _function(name: str) -> Any:
    from commbench import api

    return getattr(api, name)


class _Command(types.ModuleType):
    """A commbench module that is also the API function of its name."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _function(self.__name__.rpartition(".")[2])(*args, **kwargs)

    @property
    def __signature__(self) -> Any:  # what `inspect.signature`, help() and notebooks show
        import inspect

        return inspect.signature(_function(self.__name__.rpartition(".")[2]))


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _MODULES and type(value) is types.ModuleType:
            value.__class__ = _Command
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")  # attached (callable) as it loads
    if name in _FUNCTIONS:
        return _function(name)
    raise AttributeError(f"module 'commbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
