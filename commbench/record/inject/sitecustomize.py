"""Put on the PYTHONPATH of the command `commbench record` runs: every Python process of the
job imports it at start-up (the `site` module does), and it does nothing unless
COMMBENCH_RECORD_DIR is set. Then it waits for the process to import torch, and installs the
capture (`commbench.record.capture`) the moment torch has finished importing: before any
process group exists, so no call is missed, and a process that never imports torch (a shell
script's helpers, torchrun's own `python -c`) never does because of this file.

A `sitecustomize` found further down `sys.path` (a site's or a virtual environment's own) is
still run, after this one. Not a package: this directory holds only this file, so that
putting it on PYTHONPATH shadows nothing else.
"""

import os
import sys


def _run_next_sitecustomize() -> None:
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or ".")
        if folder == here:
            continue
        path = os.path.join(folder, "sitecustomize.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_commbench_next_sitecustomize", path)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


def _load_commbench() -> None:
    """Import the recorder's own `commbench` from COMMBENCH_PACKAGE_ROOT by its location,
    without putting that directory on sys.path (installed, it is a site-packages, which
    would shadow the job's own PYTHONPATH): its submodules then resolve inside it."""
    import importlib.util

    root = os.environ.get("COMMBENCH_PACKAGE_ROOT")
    if not root or "commbench" in sys.modules:
        return
    init = os.path.join(root, "commbench", "__init__.py")
    spec = importlib.util.spec_from_file_location(
        "commbench", init, submodule_search_locations=[os.path.dirname(init)]
    )
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["commbench"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["commbench"]
        raise


def _hook_torch() -> None:
    import importlib.abc
    import importlib.machinery

    class TorchHook(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
            if name != "torch":
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_then_capture(module):  # type: ignore[no-untyped-def]
                exec_module(module)
                try:
                    _load_commbench()
                    from commbench.record.capture import install

                    install()
                except Exception as exc:  # the job runs on, unrecorded: say why once
                    sys.stderr.write(f"commbench record: capture not installed: {exc}\n")

            loader.exec_module = exec_then_capture  # type: ignore[method-assign]
            return spec

    sys.meta_path.insert(0, TorchHook())


if os.environ.get("COMMBENCH_RECORD_DIR") and "torch" not in sys.modules:
    _hook_torch()
_run_next_sitecustomize()
