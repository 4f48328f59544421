"""Which training step a recorded call belongs to: the capture's rule, in pure Python so that
it is tested without torch (docs/traces.md, "Steps").

A step runs from one optimizer step to the next: the markers are the optimizer's steps (a
global post-hook) and `commbench.record.step()`, and step k holds the calls a rank issues
after its (k-1)th marker, up to its kth. Around them:

- **start-up**, before step 1: the calls a rank issues before it *began* training, that is
  before its first module forward, its first send or recv, and its first marker. DDP's
  broadcast of the parameters and its check of their shapes come from its constructor,
  before any forward: start-up. A pipeline stage begins its first step by exchanging with
  its neighbours (torch.distributed.pipelining's warm-up and shape exchange, then the
  activations), sends and recvs that no start-up of torch's makes: they open step 1, on
  both ends alike, so that step 1's sends and recvs pair up. A job that began nothing before
  its first marker (no module, marking its steps with `commbench.record.step()`) has no
  start-up: its calls before the first marker are step 1.
- **step 1's calls before the job began**: the start-up's last calls, when step 2 issues the
  same calls (op, name, dtype, bytes, group, peer) before it begins (its first forward or
  send/recv). A per-step broadcast issued before the forward (a learning-rate schedule, a
  data loader's seed) is start-up by the rule above in step 1 only; step 2 shows that the
  job repeats it, so it is step 1's as it is every later step's. DDP's start-up is repeated
  by no step and stays start-up. A job of one step cannot tell, and keeps it in start-up.
  Calls are the same if their signatures are, or if the same lines of the job issued them
  and only their sizes differ: a batch broadcast each step, its length varying.
- **optimizers stepped in turn**: a job with one optimizer a model part (torchtitan's
  pipeline stages) or a kind of parameter (Muon beside AdamW) steps them one after the
  other, and each step is a marker. An optimizer's step that begins right after another's,
  nothing between them (no call, no forward, no send or recv), ends the same training step:
  it reopens the step the other closed (its own calls, a DTensor's Partial gradient
  reduced, are that step's) and closes it again. A forward or a call between two optimizer
  steps (a GAN's generator after its discriminator) makes them two steps, as two
  `commbench.record.step()` markers always are.
- **an optimizer's step inside another's**: ZeroRedundancyOptimizer steps the optimizer of
  its shard inside its own step, then broadcasts the shards; both steps fire the hooks, as
  outer-pre, inner-pre, inner-post, outer-post. The inner one is the outer one's: only the
  outermost step's end is a marker, and the broadcasts after the inner one are the step's.
- **after the last marker**: no step (a final barrier, an evaluation after training). The
  capture cannot know a marker is the last until the process ends, so the calls after a
  marker are written as the next step's and given none when the process ends (`tail`).

The capture applies what this module decides (`Capture` in capture.py): it holds the
start-up's calls until the job begins (they are step 1's if a marker comes first), and
rewrites the lines it has written already when the rule moves them (`TraceWriter.restep`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from commbench.traces.records import Call

Signature = tuple[object, ...]
"""What makes two calls the same call of two steps."""

Site = tuple[tuple[str, int], ...]
"""Where the job issued a call: the (file, line) of each of its frames outside torch and
commbench, innermost first."""


def signature(call: Call) -> Signature:
    """The call without its rank, place or times."""
    return (
        call.op,
        call.name,
        call.dtype,
        call.in_bytes,
        call.out_bytes,
        call.group.name,
        call.group.ranks,
        call.peer,
    )


@dataclass(frozen=True, slots=True)
class Restep:
    """Calls already issued whose step the rule has changed."""

    seqs: range
    """Their places among the rank's calls."""
    step: int | None


def sized_apart(call: Call) -> Signature:
    """The call's signature less its sizes: a batch of a varying length, broadcast by the
    same line of the job every step, is the same call in each."""
    return (call.op, call.name, call.dtype, call.group.name, call.group.ranks, call.peer)


@dataclass(frozen=True, slots=True)
class Remembered:
    """A start-up or prologue call as the rule compares it."""

    sig: Signature
    site: Site | None = None
    unsized: Signature | None = None
    """Its signature less its sizes (`sized_apart`), where its site is known."""

    def alike(self, other: Remembered) -> bool:
        """The same call: the same signature, or the same but for the sizes issued from the
        same place of the job (a batch whose length varies, broadcast each step)."""
        if self.sig == other.sig:
            return True
        return self.site is not None and self.site == other.site and self.unsized == other.unsized


def common_suffix(a: deque[Remembered], b: deque[Remembered]) -> int:
    """How many calls `a` and `b` end with alike."""
    n = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if not x.alike(y):
            break
        n += 1
    return n


class Steps:
    """One rank's steps, fed the events its capture sees: a call issued (`call`, then
    `remember` its signature while `collecting`), a module forward (`begin`), a marker
    (`end`)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        """Most start-up calls whose signatures are kept (the capture holds no more)."""
        self.done = 0
        """Markers seen: steps closed."""
        self.began = False
        """The rank began training (a forward, a send or recv, a marker): calls are no
        longer start-up."""
        self.startup: deque[Remembered] = deque(maxlen=keep)
        self.startup_calls = 0
        """Start-up calls: seqs 0 to startup_calls - 1."""
        self.prologue: deque[Remembered] | None = None
        """Step 2's calls before it began, while they are collected (after the first marker,
        when there was a start-up, until step 2 begins or ends)."""
        self.idle = False
        """Nothing (no call, no forward, no send or recv) since the last marker."""
        self.optimizer_marked = False
        """The last marker was an optimizer's step."""
        self.stepping: list[int] = []
        """The optimizers whose steps are running, outermost first (their keys): a step
        inside another's is the outer one's, and ends no step."""

    @property
    def collecting(self) -> bool:
        """The signature of the call just issued is wanted (`remember`)."""
        return not self.began or self.prologue is not None

    def call(self, *, p2p: bool) -> tuple[int | None, Restep | None]:
        """A call issued: its step (None in start-up, and for now in the step after a marker
        if none follows), and what the rule changed if the call begins a step (a send or
        recv)."""
        restep = self.begin() if p2p else None
        self.idle = False
        if not self.began:
            self.startup_calls += 1
            return None, restep
        return self.done + 1, restep

    def remember(
        self, sig: Signature, site: Site | None = None, unsized: Signature | None = None
    ) -> None:
        """The signature of the call just issued (`call`), when `collecting`, and where the job
        issued it with its signature less its sizes, where known."""
        remembered = Remembered(sig, site, unsized)
        if not self.began:
            self.startup.append(remembered)
        elif self.prologue is not None:
            self.prologue.append(remembered)

    def begin(self) -> Restep | None:
        """A module forward or a send/recv: the rank is training. The first ends start-up;
        the one that begins step 2 compares its prologue with the start-up's end."""
        self.idle = False
        if not self.began:
            self.began = True
            return None
        if self.prologue is None:
            return None
        repeated = common_suffix(self.startup, self.prologue)
        self.prologue = None
        if not repeated:
            return None
        return Restep(range(self.startup_calls - repeated, self.startup_calls), 1)

    def optimizer_begins(self, key: int) -> bool:
        """An optimizer's step begins (`key` names the optimizer). Right after another
        optimizer's step, nothing between them, it is the same training step's: the step the
        other closed is open again, until this one's marker. A step inside another's reopens
        nothing: the outer one's step is open. True when it reopened one."""
        self._unwind(key)  # a step of its own still running raised before its post-hook
        outermost = not self.stepping
        self.stepping.append(key)
        if not (outermost and self.idle and self.optimizer_marked and self.done > 0):
            return False
        self.done -= 1
        return True

    def optimizer_ends(self, key: int) -> bool:
        """An optimizer's step ends (its post-hook): True when that is a marker, the step
        being no other's inner one. The steps begun inside it and not ended (they raised)
        end with it."""
        self._unwind(key)
        return not self.stepping

    def _unwind(self, key: int) -> None:
        """Forget `key`'s running step and those begun inside it: an exception skips an
        optimizer's post-hook, and a step left running would hold every later one inside
        it."""
        if key in self.stepping:
            del self.stepping[self.stepping.index(key) :]

    def end(self, *, optimizer: bool = False) -> bool:
        """A marker (an optimizer's step when `optimizer`): the open step closes. True when
        the rank had not begun (no forward, no send or recv): the calls held so far are step
        1, not start-up."""
        first = not self.began
        self.began = True
        self.done += 1
        self.idle = True
        self.optimizer_marked = optimizer
        collect = self.done == 1 and bool(self.startup)
        self.prologue = deque(maxlen=len(self.startup)) if collect else None
        return first

    def after_last(self, step: int | None) -> bool:
        """A call of `step` belongs to no step if the process ends now: it was issued after
        the last marker."""
        return step is not None and self.done > 0 and step > self.done
