"""The shape of `commbench/launch` (issue 44): its modules import one another without a
circle, counting the imports under `if TYPE_CHECKING:` and inside functions (a type-only
import that closes a loop is still a loop); a request record is data that the launcher takes,
never behaviour calling back into it; and every message states its fields once, as `wire`
declarations that both writing and reading follow."""

from __future__ import annotations

import dataclasses
import importlib.util

from commbench.launch import protocol
from commbench.launch.request import LaunchRequest
from tests.test_import_map import imports

PACKAGE = "commbench.launch"


def _launch_module(target: str, name: str) -> str | None:
    """The module of commbench.launch an import names (`from commbench.launch import procs`
    names `procs`), or None for one outside the package."""
    if target == PACKAGE and name and importlib.util.find_spec(f"{PACKAGE}.{name}") is not None:
        return f"{PACKAGE}.{name}"
    return target if target.startswith(PACKAGE + ".") else None


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of `graph`, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_launch_modules_import_one_another_without_a_circle() -> None:
    graph: dict[str, set[str]] = {}
    for importer, target, name in imports():
        if not importer.startswith(PACKAGE + "."):
            continue
        module = _launch_module(target, name)
        if module is not None and module != importer:
            graph.setdefault(importer, set()).add(module)
    circle = _circle(graph)
    assert circle is None, "a circle: " + " -> ".join(circle or [])


def test_the_circle_finder_finds_one() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": {"c"}}) is None


def test_a_launch_request_is_data() -> None:
    """The flags as parsed and nothing more: `launcher.resolve_launch` takes the record."""
    behaviour = [
        name
        for name, value in vars(LaunchRequest).items()
        if callable(value) and not name.startswith("__")
    ]
    assert behaviour == []


def test_a_wrapped_collectives_is_checked_beside_the_launcher_taking_its_record() -> None:
    """`slurm-script` and `k8s-manifest` check the `collectives` they wrap as they check
    `run` and `diagnose`: a function beside the work, given the record the nodes will build
    (not a classmethod of the record given the parsed options as a dict)."""
    import inspect

    from commbench.cli._job import _wrapped_check
    from commbench.launch import launcher
    from commbench.launch.request import CollectivesRun

    assert not hasattr(CollectivesRun, "check_wrapped")
    assert _wrapped_check("collectives") is launcher.check_wrapped
    assert inspect.signature(launcher.check_wrapped).parameters["request"].annotation == (
        "CollectivesRun"
    )
    for name in ("run", "diagnose"):
        assert _wrapped_check(name) is not None, name


def _messages() -> list[type[protocol.Message]]:
    """Every message class the protocol declares (`__subclasses__` would also give the
    classes `slots=True` replaced)."""
    return [
        v
        for v in vars(protocol).values()
        if isinstance(v, type) and issubclass(v, protocol.Message)
    ]


def test_every_message_states_its_fields_once() -> None:
    """Each field is one `wire` declaration (how it is read, its default); no message reads
    its fields again by hand. RankState keeps its fast path, which falls back to the
    declarations and takes its bounds from them."""
    messages = _messages()
    assert protocol.RankState in messages and protocol.MusterResult in messages
    for cls in messages:
        for spec in dataclasses.fields(cls):
            assert "read" in spec.metadata, f"{cls.__name__}.{spec.name} is not declared by wire"
        if cls not in (protocol.Message, protocol.RankState):
            assert "_read" not in vars(cls), f"{cls.__name__} reads its fields by hand"
        for name in cls.READ_FIRST:
            assert name in {f.name for f in dataclasses.fields(cls)}, (cls.__name__, name)
    fields = {f.name for f in dataclasses.fields(protocol.RankState)}
    assert fields == protocol._RANK_KEYS
    assert fields == set(protocol._RANK_INTS) | protocol._RANK_TEXTS | {"state", "quiet_s"}


def test_every_message_reads_back_what_it_writes() -> None:
    """Written by `payload`, read by the declarations: the same message again, for one of
    each kind with every field away from its default."""
    state = protocol.RankState(
        rank=3,
        local_rank=1,
        node=2,
        host="h",
        pid=7,
        point=4,
        phase="p",
        iteration=5,
        ticks=6,
        state="silent",
        quiet_s=2.5,
        error="e",
    )
    silence = protocol.NodeSilence(node=2, host="h", quiet_s=1.0, never=True, ranks=(state,))
    health = protocol.Health(phase="after", node=1, host="h", snapshot={"a": [1]}, nics=["x"])
    sign_in = protocol.MusterSignIn(node=1, host="h")
    examples: list[protocol.Message] = [
        protocol.RankBeat(
            rank=1,
            local_rank=1,
            node=2,
            host="h",
            pid=9,
            point=3,
            phase="p",
            iteration=4,
            ticks=5,
            error="x",
            time=12.5,
        ),
        state,
        silence,
        health,
        protocol.HealthGathered(phase="before", node=0, nodes=(health,)),
        protocol.Done(),
        protocol.ResultsAt(node=1, host="h", run_dir="/r"),
        protocol.Failed(rank=2, error="boom"),
        protocol.NodeDigest(node=1, host="h", seq=3, time=5.0, ranks=(state,)),
        protocol.FleetSummary(
            seq=1,
            time=2.0,
            interval=1.0,
            nnodes=4,
            reporting=3,
            progress=9,
            furthest=(2, 3),
            problems=(state,),
            silent_nodes=(silence,),
            behind=(state,),
            behind_count=2,
            truncated=1,
        ),
        protocol.GroupSummary(
            group=1,
            first=128,
            nnodes=128,
            seq=1,
            time=2.0,
            reporting=3,
            progress=9,
            furthest=(2, 3),
            running=5,
            behind_count=2,
            problems=(state,),
            silent_nodes=(silence,),
            slowest=(state,),
            truncated=1,
        ),
        protocol.RollCallAnswer(node=1, host="h", rank=8),
        protocol.RollCallResult(nnodes=4, missing=(1, 3), counter=0),
        protocol.RollCallView(rank=1, error="e", peers=("a",), answered=(0, 1), store_lost="x"),
        sign_in,
        protocol.MusterResult(expected=3, missing=(2,), joined=(sign_in,)),
    ]
    kinds = {type(m) for m in examples}
    assert kinds == {c for c in _messages() if c.KIND}, "a message without an example here"
    for message in examples:
        assert type(message).from_json(message.to_json()) == message
