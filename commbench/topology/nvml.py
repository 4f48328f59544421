"""The one wrapper around pynvml (nvidia-ml-py): lazy init, shutdown, unknown instead of errors.

Every NVML call in commbench goes through `Nvml.call`, which turns "this driver or GPU cannot
answer that" into None, so an old driver degrades to "unknown" instead of crashing. Tests
pass a fake module with the same names in place of pynvml.
"""

from __future__ import annotations

import contextlib
from typing import Any

# Error codes (nvmlReturn_t) that mean "no answer to this question", not "something broke":
# NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND (an older driver), INVALID_ARGUMENT
# (e.g. a link number past the GPU's last link), NOT_FOUND; each with how a reader says it.
_UNKNOWN_CODES = {
    2: "invalid argument",
    3: "not supported",
    4: "no permission",
    6: "not found",
    13: "not in this driver",
}

# What nvmlInit failures mean to a user, in the words of the no-GPU message.
_INIT_REASONS = {
    9: "driver not loaded",
    12: "library not found",
    18: "driver/library version mismatch",
}


class Nvml:
    """An NVML session that never raises for a missing or partial NVML.

    `open()` initialises NVML and returns None, or the reason it could not
    (`NVML: library not found`); `call(name, ...)` returns the value or None.
    """

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._open = False
        self.warnings: list[str] = []
        """Unexpected NVML failures seen, once each, for the snapshot's warnings."""

    @property
    def module(self) -> Any:
        return self._module

    def open(self) -> str | None:
        """Initialise NVML; None on success, else a one-line reason."""
        if self._module is None:
            try:
                import pynvml  # imported here: only the commands that need NVML pay for it
            except ImportError:
                return "NVML: nvidia-ml-py is not installed"
            self._module = pynvml
        try:
            self._module.nvmlInit()
        except self._module.NVMLError as exc:
            code = getattr(exc, "value", None)
            reason = _INIT_REASONS.get(code) if isinstance(code, int) else None
            return f"NVML: {reason or str(exc).lower() or f'error {code}'}"
        except OSError as exc:  # a broken libnvidia-ml.so can fail before NVML answers
            return f"NVML: cannot load library ({exc})"
        self._open = True
        return None

    def close(self) -> None:
        """Shut NVML down if `open()` succeeded; never raises."""
        if self._open:
            self._open = False
            with contextlib.suppress(self._module.NVMLError):
                self._module.nvmlShutdown()

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def const(self, name: str, default: Any) -> Any:
        """A constant from the bindings, or `default` where older bindings lack it."""
        return getattr(self._module, name, default)

    def call(self, name: str, *args: Any) -> Any:
        """`pynvml.<name>(*args)`, or None when the driver or bindings cannot answer."""
        return self.ask(name, *args)[0]

    def ask(self, name: str, *args: Any) -> tuple[Any, str]:
        """(`pynvml.<name>(*args)`, ''), or (None, why there is no answer: `not supported`,
        `no permission`, `not in this driver`, or the error NVML gave)."""
        fn = getattr(self._module, name, None)
        if fn is None:
            return None, "not in these bindings"
        try:
            return fn(*args), ""
        except self._module.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in _UNKNOWN_CODES:
                return None, _UNKNOWN_CODES[code]
            message = f"{name}: {exc}"
            if message not in self.warnings:
                self.warnings.append(message)
            return None, str(exc) or f"error {code}"
