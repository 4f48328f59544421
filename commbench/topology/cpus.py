"""CPU lists in the kernel's `0-11,24-35` form: the one format /sys, NVML and nvidia-smi share."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_CPU_LIST = re.compile(r"^[0-9]{1,9}(-[0-9]{1,9})?(,[0-9]{1,9}(-[0-9]{1,9})?)*$")


def is_cpu_list(text: str) -> bool:
    """Whether `text` is a CPU list such as `0-11,24-35`."""
    return bool(_CPU_LIST.match(text))


def parse_cpu_list(text: str) -> list[int]:
    """`0-2,8` -> [0, 1, 2, 8]. Raises ValueError on anything else."""
    text = text.strip()
    if not is_cpu_list(text):
        raise ValueError(f"not a CPU list: {text!r}")
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        start, end = int(lo), int(hi or lo)
        if end < start:
            raise ValueError(f"descending range in CPU list: {part!r}")
        cpus.update(range(start, end + 1))
    return sorted(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 8] -> `0-2,8`; empty input gives an empty string."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def cpus_from_mask(words: Sequence[int], bits_per_word: int = 64) -> list[int]:
    """CPU ids set in an affinity bitmask given as words, lowest CPUs in word 0 (NVML's form)."""
    return [
        w * bits_per_word + b
        for w, word in enumerate(words)
        for b in range(bits_per_word)
        if int(word) >> b & 1
    ]
