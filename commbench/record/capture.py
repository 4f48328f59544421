"""The capture `commbench record` puts inside every process of a job: each collective and
point-to-point call that reaches torch's dispatcher is written to the trace directory.

How it sees every call, Python's and C++'s alike (docs/design/record-capture.md): every
`ProcessGroup::<op>` in C++ goes through the dispatcher's `c10d::<op>` operator, the DDP
reducer's all_reduce, FSDP2's all_gather and reduce_scatter and the functional collectives
included, whatever the backend. This module registers, through the public `torch.library`,
a kernel for each `c10d` op at the `BackendSelect` key: a key every call passes (it is in
every thread's default included set, and `inference_mode` or an autograd kernel's
below-autograd guard do not exclude it) and at which no c10d kernel exists, so nothing of
torch's is replaced. The kernel notes the call and hands it on with `redispatch` to the
backend's own kernel (CPU, CUDA).

Why `redispatch` and nothing else: it releases the GIL while the backend runs. A Python
kernel that called the backend with the GIL held (`torch.library.get_kernel(...).call_boxed`,
or any `TorchDispatchMode`) deadlocks gloo: the caller waits for gloo's work mutex with the
GIL, while a gloo worker holding that mutex frees a tensor that our kernel gave a Python
object, and waits for the GIL. Seen in 2 of 3 runs of a 300-step DDP job (4,791 calls)
before this design, and in none of hundreds after (benchmarks/record_stress.py).

A call is written once it has completed, in issue order. Its completion time is the
backend's (`commbench.completion`): a thread of ours per process group waits each call's
Work (the GIL released) and stamps the clock when it returns; on CUDA tensors, a timing event
before the call on the job's stream and one after it on a side stream of ours give its
device time. The job's own points (the next call it issues, the next module forward, the
optimizer step's start and end, its exit) also poll `Work.is_completed`, and the first of the
two to see a call complete stamps it: send and recv are only polled (gloo's may be waited
once, by the job; they show complete once the job has waited them). Not a completion
callback: a Python callback runs on the backend's thread and must take the GIL there, which
stalled gloo's worker (the next collective waits behind it) and cost DDP steps 6 to 166% on
2 cores. The queue of calls not yet written is bounded (`MAX_PENDING`): past it the oldest
is written as never seen complete. Steps (the rule is steps.py's): a step runs from one
optimizer step (a global post-hook) or `commbench.record.step()` to the next; start-up (DDP's
broadcast) is what a rank issues before its first module forward (a global forward
pre-hook), send or recv; the calls after the last step (a final barrier) have none.

Nothing here may break the job: an error while noting a call stops the capture (said in the
rank's meta file), never the call.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from commbench.completion import Completions, CudaCompletions, PolledCompletions, wait_slice
from commbench.files import dump_json
from commbench.ops import traced
from commbench.record.meta import META_FILE, RankMeta, Stepped
from commbench.record.steps import Restep, Site, Steps, signature, sized_apart
from commbench.traces import splits
from commbench.traces.names import P2P_OPS, canonical_dtype, canonical_op
from commbench.traces.reader import read_manifest
from commbench.traces.records import MAX_ARGV, MAX_BACKENDS, Call, Group, Parameter
from commbench.traces.writer import Mark, TraceWriter, write_manifest

DIR_ENV = "COMMBENCH_RECORD_DIR"
CLOSE_DRAIN_S = 5.0
"""At exit, how long the calls in flight get to be stamped complete (at once, normally: the
job has waited its calls). Long enough for a starved core: a completion thread still inside
`Work.wait()` when the interpreter finalizes must take the GIL to return, and Python 3.11
then ends the thread through C++ frames, which aborts the process ("terminate called
without an active exception"); one job of the suite aborted so at exit under load 3."""
META_EVERY_S = 1.0
"""The rank's meta file is rewritten at a step's end at most this often (a file written and
renamed costs 0.2-0.3 ms, a step of a small job a few ms), and always at the end or on an
error: a rank killed outright leaves counts up to a second old, its calls all written."""
MAX_PENDING = 4096
"""Calls held back waiting for an earlier one to complete; past it the oldest is written
without a completion time (a call that never completes must not grow memory)."""

# The c10d ops and the schema arguments that hold each side's tensors. Every op of
# `torch.ops.c10d` that moves data or synchronises; `check_for_nan` is not a call.
_INPUT_ARGS = (
    "input_tensor",
    "input_tensors",
    "input_list",
    "inputs",
    "input",
    "tensors",
    "tensor",
)
_OUTPUT_ARGS = ("output_tensor", "output_tensors", "output_lists", "outputs", "output")
_PEER_ARGS = ("root_rank", "dst", "src")
SYMM_MEM_OPS = (
    "one_shot_all_reduce",
    "one_shot_all_reduce_out",
    "one_shot_all_reduce_copy",
    "one_shot_all_reduce_copy_out",
    "two_shot_all_reduce_",
    "two_shot_all_reduce_out",
    "multimem_all_reduce_",
    "multimem_one_shot_all_reduce",
    "multimem_one_shot_all_reduce_out",
    "multimem_one_shot_reduce_out",
    "multimem_all_gather_out",
    "reduce_scatter_out",
    "all_to_all_vdev",
    "all_to_all_vdev_2d",
    "all_to_all_vdev_2d_offset",
    "tile_reduce",
    "multi_root_tile_reduce",
    "nvshmem_all_to_all",
    "nvshmem_broadcast",
    "nvshmem_put",
    "nvshmem_get",
    "nvshmem_put_with_signal",
    "nccl_put",
    "nccl_get",
    "nccl_put_with_signal",
    "nccl_reduce_scatter_offset",
    "fused_all_gather_matmul",
    "fused_all_gather_scaled_matmul",
    "fused_matmul_reduce_scatter",
    "fused_scaled_matmul_reduce_scatter",
)
"""The symmetric-memory operators (`torch.ops.symm_mem`) that move data between ranks. They
are not c10d ops (no process group, no Work: a group name and device-side signals), so the
trace cannot hold them; the capture counts each call at the same BackendSelect key and the
manifest names them ("not captured: N calls of symm_mem::..."). Those defined only when
`torch.distributed._symmetric_memory` is imported (the fused async-TP ops) are counted when
it was imported before the capture started; async-TP's copy-engine all_gather moves data
with plain copies between mapped buffers, which no dispatcher key tells from a local copy."""


_C10D_FILE = getattr(dist.distributed_c10d, "__file__", None)
P2P_CALLERS_DEPTH = 8
"""Python frames looked through above the dispatcher for torch's own `send` or `recv`."""


def _blocking_p2p() -> bool | None:
    """Whether the send or recv being noted was made by `dist.send` or `dist.recv` (which
    issue an `isend` or `irecv` and wait it before they return: blocking), not by the job's
    `isend`, `irecv` or `batch_isend_irecv` (async, however soon it completes). The
    dispatcher's send and recv have no async_op argument, and a small isend on gloo often
    completes before the job's next call, so whether it was still in flight then does not
    tell. None where the frames cannot be read (another Python than CPython)."""
    if _C10D_FILE is None or not hasattr(sys, "_getframe"):
        return None
    frame: FrameType | None = sys._getframe(2)
    for _ in range(P2P_CALLERS_DEPTH):
        if frame is None:
            break
        code = frame.f_code
        if code.co_name in ("send", "recv") and code.co_filename == _C10D_FILE:
            return True
        frame = frame.f_back
    return False


_LIBRARY_DIRS = tuple(
    os.path.dirname(module.__file__) + os.sep
    for module in (torch, sys.modules[__name__.split(".")[0]])
    if module.__file__
)
SITE_DEPTH = 64
"""Python frames looked through for a call's site (`_site`)."""


def _site() -> Site | None:
    """Where the job issued the call being noted (steps.Site): the (file, line) of each
    frame outside torch and commbench, innermost first. Read only for the start-up's and
    step 2's first calls (`Steps.collecting`). None where the frames cannot be read."""
    if not hasattr(sys, "_getframe"):
        return None
    frame: FrameType | None = sys._getframe(2)
    out: list[tuple[str, int]] = []
    for _ in range(SITE_DEPTH):
        if frame is None:
            break
        path = frame.f_code.co_filename
        if not path.startswith(_LIBRARY_DIRS):
            out.append((path, frame.f_lineno))
        frame = frame.f_back
    return tuple(out)


def _tensors(value: Any, out: list[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _tensors(item, out)
    return out


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _split_elements(tensor: torch.Tensor | None, rows: Any) -> tuple[int, ...] | None:
    """`all_to_all_single`'s split sizes (rows of dim 0; an empty list: even) in elements,
    stored only where uneven (`splits.compact`)."""
    if tensor is None or not rows:
        return None
    per_row = tensor.numel() // tensor.shape[0] if tensor.dim() and tensor.shape[0] else 1
    return splits.compact([int(r) * per_row for r in rows], tensor.numel())


def _all_to_all_splits(
    op: _Op,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    ins: list[torch.Tensor],
    outs: list[torch.Tensor],
) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """An all_to_all's (in_splits, out_splits) in elements, None where even: `alltoall_`
    (the list form) from its tensors, one per member; `alltoall_base_` from its split
    sizes."""
    if op.name == "alltoall_":
        return (
            splits.compact([t.numel() for t in ins], sum(t.numel() for t in ins)),
            splits.compact([t.numel() for t in outs], sum(t.numel() for t in outs)),
        )
    return (
        _split_elements(ins[0] if ins else None, op.arg("input_split_sizes", args, kwargs)),
        _split_elements(outs[0] if outs else None, op.arg("output_split_sizes", args, kwargs)),
    )


def c10d_ops() -> tuple[str, ...]:
    """The `c10d` operators noted (`commbench.ops.Traced.c10d`), each traced as its op."""
    return tuple(name for _, t in traced().values() for name in t.c10d)


class _Op:
    """One c10d op's schema, read once: where its tensors, group, peer and async flag are."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.overload = getattr(torch.ops.c10d, name).default
        arguments = self.overload._schema.arguments
        self.index = {a.name: i for i, a in enumerate(arguments)}
        self.defaults = {a.name: a.default_value for a in arguments if a.has_default_value()}
        """The dispatcher leaves out an argument equal to its default: c10d's `async_op`
        defaults to True, so a call made with async_op=True arrives without it."""
        self.input = next((n for n in _INPUT_ARGS if n in self.index), None)
        self.output = next((n for n in _OUTPUT_ARGS if n in self.index), None)
        self.peer = next((n for n in _PEER_ARGS if n in self.index), None)
        self.says_async = "async_op" in self.index
        """send and recv have no async_op: `dist.send` waits at once, `isend` (and
        `batch_isend_irecv`) does not; the Python frames that made the call tell them apart
        (`_blocking_p2p`), else what the rank did next."""
        self.traced_name = name.strip("_")
        self.op = canonical_op(self.traced_name)
        found = traced().get(self.op)
        self.moves_data = found is None or not found[0].latency_only
        """False for an op without data (a barrier): its call has no sizes, whatever it
        passes (`commbench.ops.OpSpec.latency_only`)."""

    def arg(self, name: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if name is None:
            return None
        if name in kwargs:
            return kwargs[name]
        i = self.index.get(name)
        if i is None:  # not one of this op's: send, recv, monitored_barrier have no async_op
            return None
        return args[i] if i < len(args) else self.defaults.get(name)


@dataclass(slots=True)
class _Pending:
    """A call noted and not yet written: it waits for its completion and for the calls
    issued before it."""

    call: Call
    work: Any = None
    """Its `dist.Work`, polled; None without one."""
    completed_ns: int | None = None
    done: bool = False
    """Seen complete, or never to be (no Work, a failed one)."""
    says_async: bool = True
    """Its op has an async_op argument (send and recv have none)."""
    overlapped: bool = False
    """A call whose op has no async_op (send, recv) still in flight when its rank issued
    the next call: an isend or irecv, async. (A `dist.send` is waited by the job before it
    goes on, and seen complete by the poll that precedes the next call.)"""


class Capture:
    """The capture of one process: installed once, writing once the process makes its
    first call (a launcher that imports torch but never communicates writes nothing)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.lock = threading.Lock()
        self.writer: TraceWriter | None = None
        self.meta: RankMeta | None = None
        self.pending: collections.deque[_Pending] = collections.deque()
        self.groups: dict[str, Group] = {}
        self.backends: set[str] = set()
        self.host = socket.gethostname()
        self.steps = Steps(keep=MAX_PENDING)
        """The step of each call (steps.py). The start-up's calls are held until the rank
        begins (they are step 1's if a marker comes first)."""
        self.tail: Mark | None = None
        """Where the first call written after the last marker is: those calls belong to no
        step if the process ends before the next marker (`close`)."""
        self.failed: str | None = None
        self.calls = 0
        self.unfinished = 0
        self.stepped = False
        """Rank 0 wrote its optimizer's parameters (`parameters.json`, at its first step)."""
        self.ops = {name: _Op(name) for name in c10d_ops() if hasattr(torch.ops.c10d, name)}
        self._library: Any = None
        self.not_captured: collections.Counter[str] = collections.Counter()
        self.graph_captured = 0
        self._batch: tuple[int, int] | None = None
        """In a `batch_isend_irecv`: its thread and the batch's number on this rank."""
        self._batches = 0
        self._job_wait = dist.Work.wait
        """`Work.wait` as torch defines it: our threads wait through it, the job through
        `_wait_returned`'s wrapper."""
        self.completions: Completions[_Pending] = Completions(
            self._stamped, wait=functools.partial(wait_slice, wait=self._job_wait)
        )
        self.polled: PolledCompletions[_Pending] = PolledCompletions(self._stamped)
        self.cuda: CudaCompletions[_Pending] | None = None
        self._meta_due = 0.0
        self._dtypes: dict[torch.dtype, str] = {}
        self._devices: dict[torch.device, str] = {}

    # -- installing ----------------------------------------------------------------------

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        register_module_forward_pre_hook(self._guarded(self._on_forward))
        register_optimizer_step_pre_hook(self._guarded(self._before_optimizer_step))
        register_optimizer_step_post_hook(self._guarded(self._on_optimizer_step))
        self._wrap_batch_isend_irecv()
        self._wrap_work_wait()
        atexit.register(self.close)
        _chain_sigterm(self.close)
        # last: a kernel registered is a call noted, so everything it needs is in place
        library = torch.library.Library("c10d", "IMPL")
        for op in self.ops.values():
            library.impl(op.name, self._kernel(op), "BackendSelect", with_keyset=True)
        self._library = library  # kept for the process's life: dropping it unregisters
        self._symm_library = self._count_symm_mem()
        self._wait_library = self._watch_wait_tensor()

    def _wrap_batch_isend_irecv(self) -> None:
        """Mark the sends and receives of each `dist.batch_isend_irecv` as one batch
        (`Call.batch`): on NCCL they go as one group, which the replay issues as one. The
        public function is wrapped where callers look it up (`torch.distributed`, as
        `torch.distributed.pipelining` does, and the module that defines it); its calls
        still reach the dispatcher one by one, where they are noted."""
        original = dist.batch_isend_irecv

        @functools.wraps(original)
        def batch_isend_irecv(p2p_op_list: Any) -> Any:
            outer = self._batch
            self._batch = (threading.get_ident(), self._batches)
            self._batches += 1
            try:
                return original(p2p_op_list)
            finally:
                self._batch = outer

        dist.batch_isend_irecv = batch_isend_irecv
        dist.distributed_c10d.batch_isend_irecv = batch_isend_irecv

    def _wrap_work_wait(self) -> None:
        """Stamp a call complete when the job's own wait for it returns (`dist.all_reduce`
        without async_op waits so, as does `work.wait()` in a job): the job's clock, taken by
        the thread that was waiting, not by a thread of ours that needs the GIL back first
        (5 ms on an idle machine when the job runs Python next, more on a loaded one)."""
        original = self._job_wait

        @functools.wraps(original)
        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(work, *args, **kwargs)
            if self.pending and self.failed is None:
                try:
                    self._returned(work, time.time_ns())
                except Exception as exc:
                    self.fail(exc)
            return result

        dist.Work.wait = wait  # type: ignore[assignment]

    def _watch_wait_tensor(self) -> Any:
        """Poll when a functional collective's result is waited (`wait_tensor`, how DTensor
        and torch.compile's collectives wait): the job's own point where it learns a call is
        done, stamped on its clock (see `_wrap_work_wait`)."""
        try:
            overload = torch.ops._c10d_functional.wait_tensor.default
        except (AttributeError, RuntimeError):  # not in this torch
            return None
        below = torch.DispatchKey.BackendSelect
        meta = torch.DispatchKey.Meta

        def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            result = overload.redispatch(keyset.remove(below), *args, **kwargs)
            if self.pending and self.failed is None and not keyset.has(meta):
                try:
                    self.poll()
                except Exception as exc:
                    self.fail(exc)
            return result

        library = torch.library.Library("_c10d_functional", "IMPL")
        try:
            library.impl("wait_tensor", kernel, "BackendSelect", with_keyset=True)
        except RuntimeError:  # a kernel there already: left alone
            return None
        return library

    def _returned(self, work: Any, now: int) -> None:
        """The job's wait for `work` returned at `now`: its call is complete then (the first
        stamp counts); the others are polled."""
        with self.lock:
            for entry in self.pending:
                if not entry.done and entry.work is work:
                    entry.completed_ns, entry.done = now, True
        self.poll()

    def _count_symm_mem(self) -> Any:
        """Count the calls of every symmetric-memory operator there is (`SYMM_MEM_OPS`)."""
        namespace = torch.ops.symm_mem
        library = None
        for name in SYMM_MEM_OPS:
            try:
                overload = getattr(namespace, name).default
            except (AttributeError, RuntimeError):  # not in this torch (or not imported)
                continue
            if library is None:
                library = torch.library.Library("symm_mem", "IMPL")
            with contextlib.suppress(RuntimeError):  # a key it already has: left alone
                library.impl(
                    name, self._counter(f"symm_mem::{name}", overload), "BackendSelect",
                    with_keyset=True,
                )  # fmt: skip
        return library

    def _counter(self, name: str, overload: Any) -> Any:
        below = torch.DispatchKey.BackendSelect
        meta = torch.DispatchKey.Meta

        def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            if self.failed is None and not keyset.has(meta):
                self.not_captured[name] += 1  # under the GIL: one increment at a time
            return overload.redispatch(keyset.remove(below), *args, **kwargs)

        return kernel

    def _guarded(self, hook: Any) -> Any:
        """`hook`, which never raises into the job: an error stops the capture instead."""

        def guarded(*args: Any) -> None:
            if self.failed is not None:
                return
            try:
                hook(*args)
            except Exception as exc:
                self.fail(exc)

        return guarded

    def _kernel(self, op: _Op) -> Any:
        overload = op.overload
        below = torch.DispatchKey.BackendSelect
        meta = torch.DispatchKey.Meta

        def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            if self.failed is not None or keyset.has(meta):
                return overload.redispatch(keyset.remove(below), *args, **kwargs)
            issued, cpu = time.time_ns(), time.process_time_ns()
            start = None
            try:
                self.poll()
                entry = self._note(op, args, kwargs, issued, cpu)
                start = self._cuda_start(entry)
            except Exception as exc:  # never the job's problem
                self.fail(exc)
                entry = None
            result = overload.redispatch(keyset.remove(below), *args, **kwargs)
            if entry is not None:
                try:
                    self._watch(entry, result, start, returned=time.time_ns())
                except Exception as exc:
                    self.fail(exc)
            return result

        return kernel

    # -- noting a call -------------------------------------------------------------------

    def _open(self) -> None:
        rank = dist.get_rank()
        self.meta = RankMeta(
            rank=rank,
            world_size=dist.get_world_size(),
            host=self.host,
            pid=os.getpid(),
            torch_version=torch.__version__,
            argv=tuple(sys.argv[:MAX_ARGV]),  # what its reader takes
        )
        self.writer = TraceWriter(self.directory, rank)
        self._write_meta()
        if rank == 0:
            self._say_world(dist.get_world_size())

    def _group(self, obj: Any) -> Group:
        pg = dist.ProcessGroup.unbox(obj)
        name = pg.group_name
        group = self.groups.get(name)
        if group is None:
            try:
                ranks = tuple(dist.get_process_group_ranks(pg))
            except Exception:  # a group torch does not list: its ranks are not known
                ranks = ()
            group = Group(name=name, ranks=ranks)
            self.groups[name] = group
            with contextlib.suppress(Exception):
                self.backends.add(pg.name())
        return group

    def _note(
        self, op: _Op, args: tuple[Any, ...], kwargs: dict[str, Any], issued: int, cpu: int
    ) -> _Pending:
        if self.writer is None:
            self._open()
        ins = _tensors(op.arg(op.input, args, kwargs), [])
        outs = _tensors(op.arg(op.output, args, kwargs), []) if op.output else ins
        group = self._group(op.arg("process_group", args, kwargs))
        peer = op.arg(op.peer, args, kwargs)
        if isinstance(peer, int) and group.ranks and 0 <= peer < len(group.ranks):
            peer = group.ranks[peer]  # c10d passes a group rank: the trace names global ranks
        elif not isinstance(peer, int) or peer < 0:
            peer = None
        step, restep = self.steps.call(p2p=op.op in P2P_OPS)
        first = ins[0] if ins else (outs[0] if outs else None)
        data = op.moves_data and first is not None
        in_bytes = _nbytes(ins) if data else 0
        if op.op == "recv":
            in_bytes = 0
        is_async = op.arg("async_op", args, kwargs)
        blocking = _blocking_p2p() if op.op in P2P_OPS else None
        if blocking is not None:
            is_async = not blocking
        in_splits = out_splits = None
        if op.op == "all_to_all" and data:
            in_splits, out_splits = _all_to_all_splits(op, args, kwargs, ins, outs)
        call = Call(
            rank=0,
            seq=0,
            op=op.op,
            name=op.traced_name,
            in_bytes=in_bytes,
            out_bytes=_nbytes(outs) if data else 0,
            dtype=self._dtype(first.dtype) if data and first is not None else "",
            count=sum(t.numel() for t in ins) if data else 0,
            group=group,
            async_op=bool(is_async),
            issued_ns=issued,
            host=self.host,
            device=self._device(first.device) if first is not None else "",
            step=step,
            peer=peer,
            in_splits=in_splits,
            out_splits=out_splits,
            batch=self._batch[1]
            if self._batch is not None
            and op.op in P2P_OPS
            and self._batch[0] == threading.get_ident()
            else None,
            cpu_ns=cpu,
        )
        if self.steps.collecting:
            self.steps.remember(signature(call), _site(), sized_apart(call))
        if restep is not None:
            with self.lock:
                self._restep(restep)
        entry = _Pending(call, says_async=op.says_async or blocking is not None)
        with self.lock:
            for earlier in self.pending:
                if not earlier.done and not earlier.says_async:
                    earlier.overlapped = True
            self.calls += 1
            self.pending.append(entry)
            while len(self.pending) > MAX_PENDING:
                self._write(self.pending.popleft())
        return entry

    def _dtype(self, dtype: torch.dtype) -> str:
        """The trace's name of `dtype`, remembered: a job calls with a handful of them."""
        name = self._dtypes.get(dtype)
        if name is None:
            name = self._dtypes[dtype] = canonical_dtype(str(dtype))
        return name

    def _device(self, device: torch.device) -> str:
        name = self._devices.get(device)
        if name is None:
            name = self._devices[device] = str(device)
        return name

    def _cuda_start(self, entry: _Pending) -> Any:
        """A timing event on the job's stream before a call on CUDA tensors; None for other
        calls and for a call being captured into a CUDA graph (no event may be recorded
        there, and its replays never reach the dispatcher)."""
        if not entry.call.device.startswith("cuda"):
            return None
        if torch.cuda.is_current_stream_capturing():
            self.graph_captured += 1
            entry.call = replace(entry.call, graph=True)
            return None
        if self.cuda is None:
            self.cuda = CudaCompletions(self._stamped)
        return self.cuda.start()

    def _watch(
        self, entry: _Pending, result: Any, start: Any = None, returned: int | None = None
    ) -> None:
        """Keep the call's Work: waited by a thread of ours (`commbench.completion`) and
        polled at the next points the process passes (`poll`). A call without one
        (`monitored_barrier`, barrier's on some backends) blocks until it is done: it
        completed when it `returned`."""
        work = result[-1] if isinstance(result, tuple) else result
        handle = None
        if isinstance(work, torch.ScriptObject):
            with contextlib.suppress(Exception):
                handle = dist.Work.unbox(work)
        with self.lock:
            entry.work = handle
            if handle is None:
                entry.done, entry.completed_ns = True, returned
            self._flush_done()
        if handle is None:
            return
        group = entry.call.group.name
        if start is not None and self.cuda is not None:
            self.cuda.watch(group, handle, entry, start, entry.call.issued_ns, start.device)
        elif entry.call.device.startswith("cuda"):
            return  # captured into a CUDA graph: polled, as it always was
        elif entry.call.op in P2P_OPS:
            self.polled.watch(handle, entry)
        else:
            self.completions.watch(group, handle, entry)

    def _stamped(self, entry: _Pending, completed_ns: int | None) -> None:
        """A call's completion, from a thread of `commbench.completion` (None: its Work
        failed). The first to see it complete, this or `poll`, stamps it."""
        with self.lock:
            if not entry.done:
                entry.completed_ns, entry.done = completed_ns, True
                if completed_ns is None:
                    entry.work = None
        # written by the job's own thread at its next point (`poll`): this thread holds the
        # GIL a few microseconds, not the time to format and write a line

    def poll(self) -> None:
        """Mark each pending call whose Work has completed as complete now, and write the
        ones whose predecessors are all written. Runs on the job's own threads, never on
        a backend's: no Python ever runs on gloo's or NCCL's threads."""
        if not self.pending or (self.cuda is not None and torch.cuda.is_current_stream_capturing()):
            return  # nothing to poll; or a CUDA graph being captured, which a query breaks
        now = time.time_ns()
        with self.lock:
            for entry in self.pending:
                if not entry.done and entry.work is not None:
                    try:
                        if entry.work.is_completed():
                            entry.completed_ns, entry.done = now, True
                    except Exception:  # a Work that failed: never complete
                        entry.work, entry.done = None, True
            self._flush_done()

    def _flush_done(self) -> None:
        while self.pending and self.pending[0].done:
            if self._held(self.pending[0]):
                return
            self._write(self.pending.popleft())

    def _held(self, entry: _Pending) -> bool:
        """A call of a rank that has not begun: start-up if a forward, send or recv comes
        before the first marker, step 1 otherwise (bounded by MAX_PENDING)."""
        return not self.steps.began and len(self.pending) < MAX_PENDING

    def _restep(self, restep: Restep) -> None:
        """Give calls already issued the step the rule now says (under the lock): in the file
        those written, in the queue the others; none if the file's cannot be (a first step
        of more than MAX_RESTEP_BYTES keeps its start-up as written)."""
        writer = self.writer
        written = writer.written if writer is not None else 0
        on_file = range(restep.seqs.start, min(restep.seqs.stop, written))
        if on_file and writer is not None and not writer.restep(Mark(0, 0), on_file, restep.step):
            return
        for seq in range(max(restep.seqs.start, written), restep.seqs.stop):
            if seq - written < len(self.pending):
                entry = self.pending[seq - written]
                entry.call = replace(entry.call, step=restep.step)

    def _write(self, entry: _Pending) -> None:
        """Write one call (under the lock)."""
        if not entry.done:
            self.unfinished += 1
        entry.work = None  # its tensors are the job's to free
        if self.writer is not None:
            if self.tail is None and self.steps.after_last(entry.call.step):
                self.tail = self.writer.mark()
            async_op = entry.call.async_op or entry.overlapped
            self.writer.write(entry.call, completed_ns=entry.completed_ns, async_op=async_op)

    # -- steps ---------------------------------------------------------------------------

    def _on_forward(self, module: Any, inputs: Any) -> None:
        if isinstance(module, torch.fx.GraphModule) and not any(True for _ in module.children()):
            # a compiler's graph (torch.compile's aot_eager runs its compiled graphs as fx
            # GraphModules, wherever the compiled function is called: a start-up call
            # included), not a layer of the job's model; a model traced by fx keeps its
            # layers as submodules, whose forwards are seen
            if self.pending:
                self.poll()
            return
        restep = self.steps.begin()
        if restep is not None:
            with self.lock:
                self._restep(restep)
        if self.pending:
            self.poll()

    def _before_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.poll()  # the backward is over: DDP's reducer has waited for its buckets
        with self.lock:  # right after another optimizer's step: the same training step's
            self.steps.optimizer_begins(id(optimizer))

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        with self.lock:
            outermost = self.steps.optimizer_ends(id(optimizer))
        if not outermost:  # inside another's step (ZeRO's shard's optimizer): the outer's end
            return  # ends it, and lists the parameters: all of them, not this rank's shard
        if not self.stepped and self.meta is not None and self.meta.rank == 0:
            self.stepped = True  # once: the list does not change, and a big one costs
            with contextlib.suppress(Exception):
                Stepped.of(
                    [
                        Parameter(numel=p.numel(), dtype=canonical_dtype(str(p.dtype)))
                        for group in optimizer.param_groups
                        for p in group["params"]
                        if p.requires_grad
                    ]
                ).write(self.directory)
        self.end_step(optimizer=True)

    @property
    def steps_done(self) -> int:
        return self.steps.done

    def end_step(self, *, optimizer: bool = False) -> None:
        """Close the open step (at an optimizer's step when `optimizer`): the next call
        belongs to the next one (or to none, if no marker follows it)."""
        self.poll()
        with self.lock:
            # True: nothing began before the first marker: no start-up
            if self.steps.end(optimizer=optimizer):
                for entry in self.pending:
                    if entry.call.step is None:
                        entry.call = replace(entry.call, step=1)
            self.tail = None
            self._flush_done()
            if self.writer is not None:
                self.writer.flush()  # a killed job loses at most the step in flight
        if self.meta is not None and time.monotonic() >= self._meta_due:
            self._write_meta()

    def _say_world(self, world: int) -> None:
        """Rank 0 names the world size in the manifest as soon as it knows it, so that a
        trace whose recorder was killed before the end still names every rank."""
        with contextlib.suppress(Exception):
            manifest = read_manifest(self.directory)
            if not manifest.complete:
                write_manifest(
                    self.directory,
                    replace(manifest, world_size=world, torch_version=torch.__version__),
                )

    # -- ending --------------------------------------------------------------------------

    def fail(self, exc: BaseException) -> None:
        self.failed = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        with contextlib.suppress(Exception):
            self._write_meta()

    def _write_meta(self, *, closed: bool = False, ended: str | None = None) -> None:
        if self.meta is None:
            return
        meta = self.meta.with_state(
            backends=tuple(sorted(self.backends))[:MAX_BACKENDS],
            steps=self.steps_done,
            calls=self.calls,
            unfinished=self.unfinished,
            error=self.failed,
            not_captured=tuple(sorted(self.not_captured.items())),
            graph_captured=self.graph_captured,
            closed=closed,
            ended=ended,
        )
        self._meta_due = time.monotonic() + META_EVERY_S
        path = self.directory / META_FILE.format(rank=meta.rank)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(dump_json(meta.payload()))
        os.replace(tmp, path)

    def close(self, how: str = "exit") -> None:
        """Write every call still held (those not seen complete without a completion time)
        and close the rank's file, saying `how` the process ended ("exit" at exit, or the
        signal; at exit, the exception the program died of, if it did). Idempotent: atexit
        and SIGTERM may both come."""
        raised = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if how == "exit" and raised is not None:
            how = f"exception {type(raised).__name__}"
        with contextlib.suppress(Exception):
            self.poll()
            # a call the job has just waited may be a moment from its stamp; one that has
            # not completed by now (a job killed in it) is written without one
            self.completions.drain(CLOSE_DRAIN_S)
            if self.cuda is not None:
                self.cuda.drain(CLOSE_DRAIN_S)
            self.poll()
        # no thread of ours may be inside a C++ wait once the interpreter finalizes
        # (commbench/completion.py): each is stopped and joined; the Works it held dropped
        with contextlib.suppress(Exception):
            self.polled.close()
            self.completions.close(CLOSE_DRAIN_S)
            if self.cuda is not None:
                self.cuda.close(CLOSE_DRAIN_S)
        with self.lock:
            while self.pending:
                self._write(self.pending.popleft())
            writer, self.writer = self.writer, None
            if writer is not None:
                if self.tail is not None:  # issued after the last marker: no step's
                    with contextlib.suppress(Exception):
                        writer.restep(self.tail, range(self.tail.seq, writer.written), None)
                writer.close()
        if writer is not None:
            with contextlib.suppress(Exception):
                self._write_meta(closed=True, ended=how)


def _chain_sigterm(close: Any) -> None:
    """On SIGTERM (torchrun's way of stopping its workers) write what was captured, then do
    what the process would have done: its own handler, or die of the signal."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        with contextlib.suppress(Exception):
            close("SIGTERM")
        if callable(previous):
            previous(signum, frame)
            return
        if previous == signal.SIG_IGN:
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGTERM, on_term)


_capture: Capture | None = None


def install(directory: str | Path | None = None) -> Capture | None:
    """Install the capture in this process (once), writing into `directory` (default: the
    `COMMBENCH_RECORD_DIR` environment variable); None when neither names one."""
    global _capture
    if _capture is not None:
        return _capture
    where = directory or os.environ.get(DIR_ENV)
    if not where:
        return None
    capture = Capture(Path(where))
    capture.install()
    _capture = capture
    return capture


def active() -> Capture | None:
    """The capture installed in this process, if any."""
    return _capture
