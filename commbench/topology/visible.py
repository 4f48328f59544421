"""CUDA_VISIBLE_DEVICES, read the way the CUDA driver reads it, without importing torch.

CUDA numbers the GPUs a process sees 0..n-1 in the order CUDA_VISIBLE_DEVICES lists them.
Entries are device indices, `GPU-<uuid>` (a unique prefix is enough) or MIG instances
(`MIG-<uuid>`, or the older `MIG-GPU-<uuid>/<gi>/<ci>`). The first entry that names no
device ends the list: it and everything after it are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# ASCII digits, as the driver reads them; a longer index names no device (and int() of
# thousands of digits would raise)
_INDEX = re.compile(r"^-?[0-9]{1,18}$")


@dataclass(kw_only=True, slots=True)
class Visible:
    """Which devices a CUDA process sees, so GPU indices match torch's cuda:N."""

    order: list[int] = field(default_factory=list)
    """Positions in the full device list, in CUDA ordinal order."""
    warnings: list[str] = field(default_factory=list)
    """Entries that were ignored, and why."""


def _by_prefix(prefix: str, uuids: Sequence[str]) -> int | None:
    prefix = prefix.lower()
    hits = [i for i, u in enumerate(uuids) if u.lower().startswith(prefix)]
    return hits[0] if len(hits) == 1 else None


def _resolve(token: str, uuids: Sequence[str], mig_parents: Mapping[str, int]) -> int | None:
    if _INDEX.match(token):
        index = int(token)
        return index if 0 <= index < len(uuids) else None
    upper = token.upper()
    if upper.startswith("GPU-"):
        return _by_prefix(token, uuids)
    if upper.startswith("MIG-GPU-"):
        return _by_prefix(token[4:].split("/", 1)[0], uuids)
    if upper.startswith("MIG-"):
        migs = list(mig_parents)
        hit = _by_prefix(token, migs)
        return None if hit is None else mig_parents[migs[hit]]
    return None


def resolve_visible(
    uuids: Sequence[str],
    spec: str | None,
    mig_parents: Mapping[str, int] | None = None,
) -> Visible:
    """The devices CUDA would expose for CUDA_VISIBLE_DEVICES=`spec`.

    `uuids` are all GPUs in CUDA's enumeration order; `mig_parents` maps each MIG
    instance UUID to the position of its GPU. `spec` None means the variable is unset.
    """
    if spec is None:
        return Visible(order=list(range(len(uuids))))
    result = Visible()
    for raw in spec.split(","):
        token = raw.strip()
        if not token:
            if spec.strip():
                result.warnings.append(
                    "CUDA_VISIBLE_DEVICES has an empty entry: CUDA ignores it and every "
                    "entry after it"
                )
            break
        position = _resolve(token, uuids, mig_parents or {})
        if position is None:
            result.warnings.append(
                f"CUDA_VISIBLE_DEVICES entry {token!r} matches no GPU: CUDA ignores it and "
                "every entry after it"
            )
            break
        if position in result.order:
            result.warnings.append(f"CUDA_VISIBLE_DEVICES names GPU {token!r} twice: counted once")
            continue
        result.order.append(position)
    return result
