"""The ``--json`` document's per-device figures are formatted a whole column at a time; each
number must be the very one the scalar rule (``_ms``, ``_pct``) writes, including the values
that sit on a rounding half, where a naive ``rint(1000 x) / 1000`` and Python's correctly
rounded ``round(x, 3)`` disagree."""

from __future__ import annotations

import numpy as np

from neuron_profiler.reports import json_report as J


def _listed(column: np.ndarray | list) -> list:
    """A column as the Python numbers it is written as (an array's ``tolist``)."""
    return column.tolist() if isinstance(column, np.ndarray) else column


def test_ms_column_is_ms_of_each_entry() -> None:
    rng = np.random.default_rng(0)
    ns = np.concatenate(
        [rng.integers(0, 10**13, 50_000), np.arange(-500, 5000), [2**53 - 1, 2**53, 2**60]]
    )
    assert _listed(J._ms_column(ns)) == [J._ms(int(x)) for x in ns]
    grid = ns[:6000].reshape(20, 30, 10)
    assert _listed(J._ms_column(grid)) == [[[J._ms(int(x)) for x in r] for r in p] for p in grid]


def test_pct_column_is_pythons_round_even_on_halves() -> None:
    rng = np.random.default_rng(1)
    part = rng.integers(0, 10**9, 100_000)
    whole = rng.integers(1, 10**9, 100_000)
    whole[::97] = 0
    k = rng.integers(0, 100_000, 20_000)  # 100 (2k+1) / 200000 = (k + 0.5) / 1000: halves
    part = np.concatenate([part, 2 * k + 1, [7, 0]])
    whole = np.concatenate([whole, np.full(20_000, 200_000), [0, 0]])
    want = [J._pct(int(a), int(b)) for a, b in zip(part, whole, strict=True)]
    scaled = [
        1000 * 100.0 * a / b for a, b in zip(part[-20_002:-2], whole[-20_002:-2], strict=True)
    ]
    naive = [float(np.rint(x)) / 1000 for x in scaled]
    assert naive != want[-20_002:-2]  # the halves do tell the two roundings apart
    assert _listed(J._pct_column(part, whole)) == want


def test_numpy_pct_column_is_the_scalar_rule_on_numpy_numbers() -> None:
    """The breakdown's parts (devices x steps) are numpy integers, whose ``round`` is numpy's."""
    rng = np.random.default_rng(2)
    part = rng.integers(0, 10**9, (500, 40))
    wall = rng.integers(1, 10**9, 40)
    wall[3] = 0
    part[:100, :] = 2 * rng.integers(0, 100_000, (100, 40)) + 1
    wall[5] = 200_000
    want = [[J._pct(part[g, i], int(wall[i])) for i in range(40)] for g in range(500)]
    assert _listed(J._np_pct_column(part, wall)) == want


def test_document_text_escapes_as_the_standard_library() -> None:
    """Names from a trace may hold any character: the text is ASCII, escaped exactly as
    ``json.dumps(doc, indent=1)`` escapes it (BMP, DEL, controls, pairs beyond the BMP), and a
    lone surrogate (which UTF-8 cannot carry) still gives the standard library's text."""
    import json

    names = ["µs", "\x7f", "tab\there\n", "\u2028", "emoji 😀 𝔘", "plain", 'quote " \\ /']
    doc = {"names": names, "nested": [{"k µ": 1, "v": 2.5, "n": None, "b": True}], "i": -3}
    assert J.document_text(doc) == json.dumps(doc, indent=1)
    assert J.document_text(doc).isascii()
    lone = {"name": "bad \ud800 surrogate", "x": [1, 2]}
    assert J.document_text(lone) == json.dumps(lone, indent=1)


def test_document_bytes_is_the_document_text() -> None:
    from trace_factory import Build

    from neuron_profiler.analysis import Options, analyze

    b = Build().step(1, 0, 2000)
    b.host("aten::mm µ", 100, 400)
    b.kernel(150, 900, device=3, launch_us=120)
    report = analyze(b.b.build(), Options(min_gap_ns=20_000, top=5))
    errors = [("bad µ.json", "not JSON")]
    want = J.document_text(J.to_document([report], errors)).encode()
    assert J.document_bytes([report], errors) == want
    assert want.isascii() and b"\\u00b5" in want


def test_per_step_figures_are_series_per_device() -> None:
    """Steps are written once and each device holds its figures as series over them: the
    entry for device g and step i is the report's figure for that device in that step."""
    from trace_factory import Build

    from neuron_profiler.analysis import Options, analyze
    from neuron_profiler.analysis.causes import ALL_CAUSES

    b = Build().step(1, 0, 2000).step(2, 2000, 5000)
    b.host("aten::mm", 100, 400)
    b.kernel(150, 900, device=3, launch_us=120)
    b.kernel(2100, 2600, device=3, launch_us=2050)
    b.kernel(2200, 4100, device=5, launch_us=2150)
    report = analyze(b.b.build(), Options(min_gap_ns=20_000, top=5))
    doc = J.to_document([report])["traces"][0]
    breakdown, idle = doc["step_breakdown"], doc["idle"]
    assert [s["step"] for s in breakdown["steps"]] == idle["steps"] == list(report.steps.names)
    assert [s["wall_ms"] for s in breakdown["steps"]] == [2.0, 3.0]
    devices = {d.device: d for d in report.breakdown.devices}
    assert [d["device"] for d in breakdown["devices"]] == [3, 5] == sorted(devices)
    for row in breakdown["devices"]:
        want = devices[row["device"]]
        assert row["busy_ms"] == [ns / 1e6 for ns in want.busy_ns.tolist()]
        assert row["not_busy_ms"] == [ns / 1e6 for ns in want.not_busy_ns.tolist()]
        assert row["emulator_overhead_ms"] == [0.0, 0.0] and "idle_ms" not in row
        walls = report.breakdown.wall_ns.tolist()
        assert row["busy_pct"] == [
            round(100 * b / w, 3) for b, w in zip(want.busy_ns.tolist(), walls, strict=True)
        ]
    assert breakdown["devices"][1]["busy_ms"] == [0.0, 1.9]  # device 5: nothing in step 1
    per_device = {d.device: d for d in report.idle.devices}
    for row in idle["devices"]:
        want = per_device[row["device"]]
        for cause in ALL_CAUSES:
            assert row["per_step_ms"][cause] == [s[cause] / 1e6 for s in want.per_step_by_cause_ns]
        assert len(row["per_step_ms"]["emulator_overhead"]) == 2
