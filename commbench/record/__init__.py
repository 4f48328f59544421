"""`commbench record`: capture every collective of a job into a trace directory (issue 26).

`commbench.record.step()` marks the end of a training step in a job that steps no torch
optimizer (the capture counts optimizer steps by itself); outside a recorded job it does
nothing, so a training script may call it unconditionally.
"""

from __future__ import annotations

import sys


def step() -> None:
    """End the current step of the recorded job (no-op when it is not being recorded)."""
    capture_module = sys.modules.get("commbench.record.capture")
    if capture_module is None:
        return
    capture = capture_module.active()
    if capture is not None and capture.failed is None:
        try:
            capture.end_step()
        except Exception as exc:  # the job's step must not fail for the recording
            capture.fail(exc)
