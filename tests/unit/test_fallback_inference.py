"""CPU fallbacks inferred where the runtime emits no fallback rows (real hardware): a capture shaped
as libnrt writes it (tests/realistic_capture.py), merged onto a host trace whose metadata holds
torch_neuronx.get_fallback_ops(), with fallbacks injected as ``cpu_fallback`` runs them (the op's
device dispatch holding the input copies, the CPU kernel and the output copy) next to decoys.
Every expectation comes from what was injected."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from realistic_capture import Capture
from trace_factory import US, Build

from neuron_profiler.analysis import Options, analyze
from neuron_profiler.runtime_trace.merge import merge_device_events
from neuron_profiler.trace import EventKind, TraceBuilder
from neuron_profiler.trace import vocabulary as V

TID, OTHER_TID, HOST_PID, STEPS, STEP_US = 11, 12, 4242, 3, 4_700
# as torch_neuronx might spell them: bare, namespaced, with an overload
LISTED = ["nonzero", "aten::median.default", "aten::unique_dim"]


@dataclass
class Injected:
    """Per op: calls, D2H (count, bytes), H2D (count, bytes), host ns of the CPU kernels and
    the device idle between its copies (ns)."""

    calls: int = 0
    d2h: list[int] = field(default_factory=list)
    h2d: list[int] = field(default_factory=list)
    host_ns: int = 0
    idle_ns: int = 0
    # per call: (its H2D copy's end, its dispatching op's end), absolute ns: the idle after the
    # copy, up to the next device work, is the fallback's when it begins inside the op
    after: list[tuple[int, int]] = field(default_factory=list)


class Workload:
    def __init__(self) -> None:
        self.cap = Capture(cores=1, epoch_hours=3, drift_ppm=40)
        self.host = TraceBuilder("host.json")
        self.host.metadata[V.META_FALLBACK_OPS] = LISTED
        self.truth: dict[str, Injected] = {}
        self.decoy_copy_ns = 0

    def op(self, name: str, start_us: int, dur_us: int, tid: int = TID) -> tuple[int, int]:
        o = self.cap.host_op(tid, self.t0 + start_us * US, dur_us * US)
        self.host.add(
            name=name,
            ts_ns=o.start,
            dur_ns=o.end - o.start,
            kind=EventKind.CPU_OP,
            cat="cpu_op",
            pid=HOST_PID,
            tid=tid,
            args={V.ARG_EXTERNAL_ID: o.corr},
        )
        return start_us, start_us + dur_us

    def kernel(self, name: str, start_us: int) -> None:
        s, _ = self.op(name, start_us, 300)
        self.cap.execute(tid=TID, core=0, start=self.t0 + (s + 10) * US, device_dur=200 * US)

    def copy(self, direction: str, at_us: int, size: int, dur_us: int = 20) -> tuple[int, int]:
        """A copy launched at ``at_us`` inside a host op; its device span (µs), as the capture
        records it (host-timed, 4 µs after its call starts)."""
        self.cap.copy(
            tid=TID,
            core=0,
            start=self.t0 + at_us * US,
            direction=direction,
            size=size,
            dur=dur_us * US,
        )
        return at_us + 4, at_us + 4 + dur_us

    def fallback(
        self,
        name: str,
        start_us: int,
        inputs: list[int],
        output: int,
        inner_us: int,
        *,
        launches_kernel: bool = False,
    ) -> int:
        """cpu_fallback's shape: <name> holding one copy_ per input (D2H), the CPU kernel
        <name>, then a copy_ of the output (H2D) or, for a decoy, an op launching a kernel."""
        t, spans = start_us + 10, []
        for size in inputs:
            self.op("aten::copy_", t, 100)
            spans.append(self.copy("d2h", t + 5, size))
            t += 105
        self.op(name, t, inner_us)
        t += inner_us + 10
        if launches_kernel:
            self.op("aten::add", t, 280)
            self.cap.execute(tid=TID, core=0, start=self.t0 + (t + 10) * US, device_dur=100 * US)
            t += 280
        else:
            self.op("aten::copy_", t, 100)
            spans.append(self.copy("h2d", t + 5, output))
            t += 100
        self.op(name, start_us, t + 10 - start_us)  # the op's device dispatch around it all
        if launches_kernel:
            self.decoy_copy_ns += (spans[0][1] - spans[0][0]) * US
        elif name in ("aten::nonzero", "aten::median"):
            got = self.truth.setdefault(name, Injected())
            got.calls += 1
            got.d2h += inputs
            got.h2d.append(output)
            got.host_ns += inner_us * US
            got.idle_ns += sum(b[0] - a[1] for a, b in zip(spans[:-1], spans[1:], strict=True)) * US
            got.after.append((self.t0 + spans[-1][1] * US, self.t0 + (t + 10) * US))
        else:
            self.decoy_copy_ns += sum(e - s for s, e in spans) * US
        return t + 10

    def step(self, n: int, t0: int) -> None:
        self.t0 = t0
        self.host.add(
            name=f"ProfilerStep#{n}",
            ts_ns=t0,
            dur_ns=STEP_US * US,
            kind=EventKind.USER_ANNOTATION,
            cat="user_annotation",
            pid=HOST_PID,
            tid=TID,
        )
        self.kernel("aten::mm", 0)
        self.fallback("aten::nonzero", 305, [4096], 512, 500)
        # another thread launches between nonzero's D2H and its CPU kernel (its kernel runs
        # after the fallback): only the fallback's own thread counts
        self.op("aten::mm", 330, 70, tid=OTHER_TID)
        self.cap.execute(
            tid=OTHER_TID,
            core=0,
            start=self.t0 + 335 * US,
            device_dur=100 * US,
            queue_free=self.t0 + 980 * US,
        )
        self.kernel("aten::mm", 1210)
        self.fallback("aten::median", 1515, [8192, 64], 4, 300)
        self.kernel("aten::mm", 2165)
        self.op("aten::unique_dim", 2470, 100)  # listed, between kernels: no copies
        self.kernel("aten::mm", 2575)
        self.fallback("aten::unique_dim", 2880, [2048], 0, 100, launches_kernel=True)  # no H2D
        self.fallback("aten::cumsum", 3405, [1024], 1024, 200)  # the pattern, but not listed
        # a user's .cpu(), nonzero on the host tensor, .to(device): copies not under the op
        self.op("aten::to", 3910, 100)
        d2h = self.copy("d2h", 3915, 256)
        self.op("aten::nonzero", 4020, 200)
        self.op("aten::to", 4230, 100)
        h2d = self.copy("h2d", 4235, 256)
        self.decoy_copy_ns += (d2h[1] - d2h[0] + h2d[1] - h2d[0]) * US
        self.kernel("aten::mm", 4335)


@pytest.fixture(scope="module")
def workload() -> Workload:
    w = Workload()
    t = w.cap.now
    w.cap.sync(0, t)
    for n in range(STEPS):
        w.step(n + 1, t + 1_000 * US + n * STEP_US * US)
    w.cap.sync(0, t + (STEPS + 1) * STEP_US * US)
    return w


@pytest.fixture(scope="module")
def merged(workload: Workload):  # noqa: ANN201
    return merge_device_events(workload.host.build(), [workload.cap.fetch()]).trace


@pytest.fixture(scope="module")
def report(merged):  # noqa: ANN001, ANN201
    return analyze(merged, Options(min_gap_ns=50 * US))


def _idle_after(merged, truth: Injected) -> int:  # noqa: ANN001
    """The device idle after each call's H2D copy up to the next device work, when it begins
    inside the call's op and is a gap of at least --min-gap (shorter ones are launch gaps)."""
    device = merged.mask(kind=[EventKind.KERNEL, EventKind.MEMCPY])
    starts = sorted(merged.col("ts_ns")[device].tolist())
    total = 0
    for copy_end, op_end in truth.after:
        nxt = next(s for s in starts if s >= copy_end)
        if copy_end <= op_end and nxt - copy_end >= 50 * US:
            total += nxt - copy_end
    return total


def test_inferred_groups_equal_what_was_injected(report, workload: Workload) -> None:  # noqa: ANN001
    got = {
        g.op: (g.calls, g.d2h_count, g.d2h_bytes, g.h2d_count, g.h2d_bytes, g.host_ns, g.inferred)
        for g in report.findings.fallbacks
    }
    want = {
        op: (t.calls, len(t.d2h), sum(t.d2h), len(t.h2d), sum(t.h2d), t.host_ns, True)
        for op, t in workload.truth.items()
    }
    assert got == want and set(want) == {"aten::nonzero", "aten::median"}


def test_inferred_fallbacks_own_the_idle_between_their_copies(
    report,  # noqa: ANN001
    merged,  # noqa: ANN001
    workload: Workload,
) -> None:
    """The device idles between a call's copies while the host computes, and after its last
    copy while the host is still in the op (up to the next device work): that idle is the
    fallback's (rule 2), all of it, and nothing else is."""
    want = {op: t.idle_ns + _idle_after(merged, t) for op, t in workload.truth.items()}
    assert want["aten::median"] > workload.truth["aten::median"].idle_ns  # the layout has some
    for g in report.findings.fallbacks:
        assert g.idle_ns == want[g.op]
    assert report.idle.by_cause_ns["cpu_fallback"] == sum(want.values())
    assert all(g.native_ns is None and g.reason for g in report.findings.fallbacks)
    kinds = {f.kind for f in report.findings.findings}
    assert {"cpu_fallback:aten::nonzero", "cpu_fallback:aten::median"} <= kinds


def test_decoys_copies_stay_exposed(report, workload: Workload) -> None:  # noqa: ANN001
    """The inferred calls' copies belong to them; the decoys' copies (no H2D, not listed, not
    under the op) are exposed copies, exactly."""
    (exposed,) = [f for f in report.findings.findings if f.kind == "exposed_copies"]
    assert exposed.recoverable_ns == workload.decoy_copy_ns


def _layout_b(
    listed: list[str] | None,
    *,
    kernel_between: bool = False,
    ext: int = 5,
    dims: list | None = None,
) -> Build:
    """A step: kernel; D2H copy; host op aten::nonzero (External id 5); H2D copy; kernel. The
    copies carry External id ``ext``; no op encloses the host op."""
    b = Build().step(1, 0, 1000)
    if listed is not None:
        b.b.metadata[V.META_FALLBACK_OPS] = listed
    b.kernel(0, 100, launch_us=0)
    copy = {V.ARG_EXTERNAL_ID: ext}
    b.kernel(
        110,
        130,
        launch_us=105,
        kind=EventKind.MEMCPY,
        stream=2,
        name=V.MEMCPY_NAMES["d2h"],
        args={**copy, V.ARG_BYTES: 800},
    )
    if kernel_between:
        b.kernel(135, 140, launch_us=135)
    b.host(
        "aten::nonzero",
        150,
        600,
        args={
            V.ARG_EXTERNAL_ID: 5,
            V.ARG_INPUT_DIMS_KEYS[0]: dims or [[100]],
            V.ARG_INPUT_TYPE: ["float"],
        },
    )
    b.kernel(
        620,
        640,
        launch_us=610,
        kind=EventKind.MEMCPY,
        stream=2,
        name=V.MEMCPY_NAMES["h2d"],
        args={**copy, V.ARG_BYTES: 80},
    )
    b.kernel(700, 1000, launch_us=690)
    return b


def test_linked_by_external_id_without_a_parent() -> None:
    (g,) = _layout_b(["aten::nonzero.out"]).report().findings.fallbacks
    assert (g.op, g.shapes, g.dtypes, g.inferred, g.calls) == (
        "aten::nonzero",
        "[[100]]",
        "['float']",
        True,
        1,
    )
    assert (g.d2h_count, g.d2h_bytes, g.h2d_count, g.h2d_bytes) == (1, 800, 1, 80)
    assert g.idle_ns == (620 - 130) * US and g.host_ns == 450 * US


def test_inferred_call_priced_by_the_cost_model_on_the_named_chip() -> None:
    """A real capture names its chip but gives no peaks: nonzero of 1M float32 on trn2 reads
    4 MB and (priced like an elementwise op) writes 4 MB: 8 MB at 725 GB/s per logical core =
    11,034 ns, its 1M flops at 492 GFLOPS 2,033 ns: native 11,034 ns. Without a named chip it
    stays unknown."""
    b = _layout_b(["nonzero"], dims=[[1_000_000]])
    b.b.metadata["deviceProperties"] = [
        {V.PROP_ID: 0, V.PROP_NAME: "NeuronCore 0", V.PROP_CHIP: "trn2", V.PROP_PEAKS_KNOWN: False}
    ]
    (g,) = b.report().findings.fallbacks
    assert g.inferred and g.native_ns == int(8e6 / 725e9 * 1e9)
    measured = g.idle_ns + (130 - 110) * US + (640 - 620) * US
    assert g.recoverable_ns == max(0, measured - g.native_ns)
    b = _layout_b(["nonzero"], dims=[[1_000_000]])
    (g,) = b.report().findings.fallbacks
    assert g.native_ns is None


@pytest.mark.parametrize(
    ("listed", "kernel_between", "ext"),
    [
        (None, False, 5),  # no set in the metadata
        (["aten::cumsum"], False, 5),  # the pattern, but the op is not listed
        (["nonzero"], True, 5),  # work launched between the D2H and the op
        (["nonzero"], False, 9),  # copies of another op, and no parent op holds them
    ],
)
def test_not_inferred(listed: list[str] | None, kernel_between: bool, ext: int) -> None:
    r = _layout_b(listed, kernel_between=kernel_between, ext=ext).report()
    assert r.findings.fallbacks == ()
    assert r.idle.by_cause_ns["cpu_fallback"] == 0


def test_fallback_rows_are_not_inferred_twice() -> None:
    """With fallback rows (the emulator's) the listed op holding one is not inferred again."""
    b = _layout_b(["nonzero"])
    b.host(
        V.FALLBACK_PREFIX + "aten::nonzero",
        150,
        600,
        kind=EventKind.FALLBACK,
        cat=V.CAT_RUNTIME,
        args={V.ARG_EXTERNAL_ID: 5, V.ARG_OP: "aten::nonzero"},
    )
    (g,) = b.report().findings.fallbacks
    assert not g.inferred and (g.calls, g.d2h_count, g.h2d_count) == (1, 1, 1)


@pytest.mark.parametrize("listed", ["nonzero", {"op": "nonzero"}, [1, None, " ", "nonzero"]])
def test_odd_fallback_sets(listed: object) -> None:
    """A set that is not a list of names is no set; entries that are not names are left out."""
    b = _layout_b(None)
    b.b.metadata[V.META_FALLBACK_OPS] = listed
    groups = b.report().findings.fallbacks
    assert [g.op for g in groups] == (["aten::nonzero"] if isinstance(listed, list) else [])
