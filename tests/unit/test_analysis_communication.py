"""Communication per step and per FSDP unit on hand-built traces: every figure below is worked
out by hand from the intervals drawn in each test's docstring (µs)."""

from __future__ import annotations

import pytest
from trace_factory import US, Build

from neuron_profiler.analysis.communication import FSDP1_UNIT, OUTSIDE_UNITS, ROOT_UNIT
from neuron_profiler.trace import EventKind

CC_STREAM = 3


def _range(b: Build, name: str, start: int, end: int, tid: int = 100) -> None:
    b.host(name, start, end, kind=EventKind.USER_ANNOTATION, cat="user_annotation", tid=tid)


def _collective(b: Build, name: str, start: int, end: int, launch: int) -> None:
    b.kernel(start, end, launch_us=launch, name=name, stream=CC_STREAM)


def fsdp_step() -> Build:
    """One step 0-1000. Compute (TensorE) 200-400 and 700-900.
    - layers.0: all-gather 100-300 launched at 5 in ``FSDP::all_gather (layers.0)`` (0-20),
      after its peer wait 80-100 (launched at 6): 100 hidden, 100 exposed, 20 waited; its
      backward all-gather 600-700 launched at 510 in ``FSDP::backward_prefetch for layers.0``
      (505-515) inside ``FSDP::pre_backward (layers.1)`` (500-520): 100 exposed.
    - (root): all-gather 400-450 launched at 45 in the unnamed ``FSDP::all_gather`` (40-50):
      50 exposed (compute ends at 400).
    - layers.1: reduce-scatter 720-920 launched at 710 in ``FSDP::post_backward_reduce
      (layers.1)`` (700-720): 180 hidden, 20 exposed.
    - an all-reduce 950-990 launched at 950 in no FSDP range (another thread's FSDP range,
      940-1000, does not count): 40 exposed, outside FSDP units.
    """
    b = Build().step(1, 0, 1000)
    _range(b, "FSDP::all_gather (layers.0)", 0, 20)
    _collective(b, "CC wait: allgather", 80, 100, launch=6)
    _collective(b, "CC: allgather", 100, 300, launch=5)
    _range(b, "FSDP::all_gather", 40, 50)
    _collective(b, "CC: allgather", 400, 450, launch=45)
    _range(b, "FSDP::pre_backward (layers.1)", 500, 520)
    _range(b, "FSDP::backward_prefetch for layers.0", 505, 515)
    _collective(b, "CC: allgather", 600, 700, launch=510)
    _range(b, "FSDP::post_backward_reduce (layers.1)", 700, 720)
    _collective(b, "CC: reduce_scatter", 720, 920, launch=710)
    _range(b, "FSDP::post_backward_reduce (layers.2)", 940, 1000, tid=200)
    _collective(b, "CC: allreduce", 950, 990, launch=950)
    b.kernel(200, 400, launch_us=30)
    b.kernel(700, 900, launch_us=600)
    return b


def test_units_get_their_collectives_hidden_and_exposed_time() -> None:
    comm = fsdp_step().report().communication
    units = {
        u.name: (u.collectives, u.collective_ns, u.hidden_ns, u.exposed_ns, u.peer_wait_ns)
        for u in comm.units
    }
    assert units == {
        "layers.0": (2, 300 * US, 100 * US, 200 * US, 20 * US),
        ROOT_UNIT: (1, 50 * US, 0, 50 * US, 0),
        OUTSIDE_UNITS: (1, 40 * US, 0, 40 * US, 0),
        "layers.1": (1, 200 * US, 180 * US, 20 * US, 0),
    }
    assert [u.name for u in comm.units] == ["layers.0", ROOT_UNIT, OUTSIDE_UNITS, "layers.1"]
    by_kind = {u.name: dict(u.exposed_by_kind) for u in comm.units}
    assert by_kind["layers.0"] == {"all_gather forward": 100 * US, "all_gather backward": 100 * US}
    assert by_kind["layers.1"] == {"reduce_scatter": 20 * US}
    assert by_kind[OUTSIDE_UNITS] == {"all_reduce": 40 * US}
    assert comm.from_fsdp


def test_totals_and_steps_count_each_instant_once() -> None:
    comm = fsdp_step().report().communication
    t = comm.total
    # union 100-300, 400-450, 600-700, 720-920, 950-990; hidden 200-300 and 720-900
    assert (t.collectives, t.collective_ns, t.hidden_ns, t.exposed_ns, t.peer_wait_ns) == (
        5,
        590 * US,
        280 * US,
        310 * US,
        20 * US,
    )
    (step,) = comm.steps
    assert (step.name, step.collective_ns, step.exposed_ns) == ("1", 590 * US, 310 * US)


def test_each_step_says_which_kinds_were_exposed() -> None:
    """Step 1 (0-500): an all-reduce 100-200, all exposed. Step 2 (500-1000): a reduce-scatter
    600-650, exposed, and an all-reduce 700-740 whose last 20 µs lie under a kernel 720-800."""
    b = Build().step(1, 0, 500).step(2, 500, 1000)
    _collective(b, "CC: allreduce", 100, 200, launch=90)
    _collective(b, "CC: reduce_scatter", 600, 650, launch=590)
    _collective(b, "CC: allreduce", 700, 740, launch=690)
    b.kernel(720, 800, launch_us=695)
    steps = b.report().communication.steps
    assert [(s.name, s.exposed_ns, s.exposed_by_kind) for s in steps] == [
        ("1", 100 * US, (("all_reduce", 100 * US),)),
        ("2", 70 * US, (("reduce_scatter", 50 * US), ("all_reduce", 20 * US))),
    ]


def test_kinds_read_by_the_one_rule_of_the_cost_model() -> None:
    """ "CC: all gather" (100-200) is an all-gather and "CC: all_to_all" (300-350) an
    all-to-all, both exposed: ``vocabulary.collective_kind``, which the projection's ring model
    reads too (both used to be "other" here while the projection priced an all-gather)."""
    from neuron_profiler.costmodel.roofline import ring_traffic

    b = Build().step(1, 0, 500)
    _collective(b, "CC: all gather", 100, 200, launch=90)
    _collective(b, "CC: all_to_all", 300, 350, launch=290)
    (step,) = b.report().communication.steps
    assert step.exposed_by_kind == (("all_gather forward", 100 * US), ("all_to_all", 50 * US))
    for name in ("CC: all gather", "allgather", "ncclDevKernel_AllGather_RING_LL"):
        assert ring_traffic(8e6, 8, name) == (7, 7e6)
    assert ring_traffic(8e6, 8, "CC: all_to_all") == (7, 7e6)
    assert ring_traffic(8e6, 8, "all-reduce") == (14, 14e6)
    assert ring_traffic(8e6, 8, "broadcast") == (7, 8e6)


def test_only_the_mostly_exposed_unit_is_flagged_and_the_finding_advises_on_it() -> None:
    """layers.0: 2/3 of its collective time exposed, 200 of the 310 exposed: flagged. (root):
    all exposed but 50 of 310 (under 30%); layers.1: 10% exposed."""
    report = fsdp_step().report()
    assert report.communication.flagged == ("layers.0",)
    (f,) = [f for f in report.findings.findings if f.kind == "exposed_communication"]
    assert f.recoverable_ns == 200 * US and f.recoverable_pct == 20.0
    assert "layers.0" in f.title
    assert "backward_prefetch" in f.suggestion and "forward_prefetch" in f.suggestion
    assert "reduce-scatter" not in f.suggestion  # layers.0 exposed no reduce-scatter
    assert sorted(f.ranges_ns) == [(100 * US, 200 * US), (600 * US, 700 * US)]


def test_hidden_communication_is_no_finding() -> None:
    """An all-reduce 100-200 under compute 50-250: all hidden; no finding, nothing flagged."""
    b = Build().step(1, 0, 300)
    _collective(b, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 100, 200, launch=90)
    b.kernel(50, 250, launch_us=40)
    report = b.report()
    assert report.communication.total.hidden_ns == 100 * US
    assert report.communication.total.exposed_ns == 0 and report.communication.flagged == ()
    assert not [f for f in report.findings.findings if f.kind == "exposed_communication"]


def test_fsdp1_ranges_name_no_module() -> None:
    """FSDP1's ranges carry no FQN: one unit for them; a trace without collectives has no
    communication section."""
    b = Build().step(1, 0, 300)
    _range(b, "FullyShardedDataParallel._pre_forward", 0, 20)
    _collective(b, "CC: allgather", 100, 200, launch=10)
    assert [u.name for u in b.report().communication.units] == [FSDP1_UNIT]
    assert Build().step(1, 0, 10).report().communication.device is None


def test_renderers_show_the_result() -> None:
    """--json (valid against the shipped schema), the terminal and the HTML report carry the
    result's figures as they are."""
    import io
    import json

    import jsonschema
    from rich.console import Console

    from neuron_profiler.reports.html_report import render_html
    from neuron_profiler.reports.json_report import schema_text, to_document
    from neuron_profiler.reports.terminal import render_terminal

    report = fsdp_step().report()
    doc = to_document([report])
    jsonschema.validate(doc, json.loads(schema_text()))
    section = doc["traces"][0]["communication"]
    assert section["flagged_units"] == ["layers.0"]
    assert section["total"]["exposed_ms"] == 0.31 and section["total"]["peer_wait_ms"] == 0.02
    (layers0,) = [u for u in section["units"] if u["name"] == "layers.0"]
    assert layers0["exposed_by_kind_ms"] == {"all_gather forward": 0.1, "all_gather backward": 0.1}
    assert layers0["hidden_ms"] == 0.1 and layers0["exposed_pct"] == pytest.approx(66.667)
    out = io.StringIO()
    render_terminal([report], console=Console(file=out, width=200))
    line = next(x for x in out.getvalue().splitlines() if "layers.0 *" in x)
    assert "0.300" in line and "0.200" in line and "66.7" in line
    page = render_html([report])
    assert '<td>layers.0 *</td><td class="n">2</td><td class="n">0.300</td>' in page


def test_the_device_with_the_most_exposed_communication_is_analysed() -> None:
    """Device 0: an all-reduce 0-100 under compute 0-100 (hidden); device 1: one 0-60 with
    no compute (60 exposed); device 2 has compute only."""
    b = Build().step(1, 0, 200)
    b.kernel(0, 100, device=0, launch_us=0, name="ncclKernel_AllReduce_RING_LL_Sum_float", stream=7)
    b.kernel(0, 100, device=0, launch_us=0)
    b.kernel(0, 60, device=1, launch_us=0, name="ncclKernel_AllReduce_RING_LL_Sum_float", stream=7)
    b.kernel(0, 150, device=2, launch_us=0)
    comm = b.report().communication
    assert comm.device == 1 and comm.total.exposed_ns == 60 * US
