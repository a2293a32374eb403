"""``neuron-prof export / merge / analyze`` on Neuron Explorer profiles (SYNTHETIC, from
tests/explorer_fixture.py) and AWS's native PyTorch output; bad Parquet is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from explorer_fixture import EVENT_MIX, FRAMEWORK_EVENTS, HOST_TID, PID, build  # noqa: E402
from explorer_support import require_pyarrow  # noqa: E402

from neuron_profiler.cli.main import main  # noqa: E402
from neuron_profiler.trace import load_trace  # noqa: E402
from neuron_profiler.trace import schema as S  # noqa: E402

HOST_EXTERNAL_BASE = 70_000


@pytest.fixture(scope="module")
def fx():  # noqa: ANN201
    require_pyarrow()
    return build()


def _host_trace(fx, path: Path, rank: int = 0) -> Path:  # noqa: ANN001
    """torch.profiler's view of the same framework ops, with its own External ids."""
    events = []
    for k, eid in enumerate(fx.truth.framework_ids):
        ev = fx.events[eid - 1]
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": ev["name"],
                "pid": PID,
                "tid": HOST_TID,
                "ts": (ev["start_ts"] - fx.events[0]["start_ts"]) / 1e3,
                "dur": ev["duration_ns"] / 1e3,
                "args": {"External id": HOST_EXTERNAL_BASE + k},
            }
        )
    doc = {
        "traceEvents": events,
        "baseTimeNanoseconds": fx.events[0]["start_ts"],
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
    }
    path.write_text(json.dumps(doc))
    return path


def test_export_a_profile_alone(fx, tmp_path: Path) -> None:  # noqa: ANN001
    d = fx.write(tmp_path / "profile")
    assert main(["export", str(d), "-o", str(tmp_path / "p.json")]) == 0
    t = load_trace(tmp_path / "p.json")
    complete = t.columns[S.PH] == S.Phase.COMPLETE
    assert int(complete.sum()) == sum(EVENT_MIX.values()) + FRAMEWORK_EVENTS
    assert int((t.columns[S.PH] == S.Phase.COUNTER).sum()) == 982
    names = set(t.process_names.values())
    assert {n for n in names if n.startswith("NeuronCore ")} == {
        f"NeuronCore {c} (i-0synthetic00000001 pid {PID}, worker {100 + c})" for c in (0, 1)
    }
    assert main(["export", str(d), "-o", str(tmp_path / "p.pftrace")]) == 0
    assert (tmp_path / "p.pftrace").stat().st_size > 0


def test_project_reads_a_profile_as_analyze_does(fx, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """``project`` read only torch.profiler files: a profile directory was "Is a directory"."""
    d = fx.write(tmp_path / "profile")
    assert main(["export", str(d), "-o", str(tmp_path / "p.json")]) == 0
    capsys.readouterr()
    args = ["--chip", "same", "--source-chip", "trn2", "--json"]
    assert main(["project", str(d), *args]) == 0
    from_profile = json.loads(capsys.readouterr().out)
    assert main(["project", str(tmp_path / "p.json"), *args]) == 0
    assert from_profile == json.loads(capsys.readouterr().out)  # the same trace, read directly
    assert from_profile["source"]["step_ms"] > 0


def test_merge_detects_the_profile_and_links_to_host_ops(fx, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    d = fx.write(tmp_path / "profile")
    host = _host_trace(fx, tmp_path / "host.pt.trace.json")
    out = tmp_path / "merged.json"
    assert main(["merge", str(host), str(d), "-o", str(out)]) == 0
    t = load_trace(out)
    kernels = (t.columns[S.KIND] == S.EventKind.KERNEL) & (t.columns[S.PH] == S.Phase.COMPLETE)
    roots = [HOST_EXTERNAL_BASE + fx.truth.external[r] - 1 for r in fx.truth.root_of_execution]
    linked = set(t.columns[S.EXTERNAL_ID][kernels].tolist())
    assert linked == set(roots)  # every execution and collective: its execute_model op
    assert "merged 8634 device activities" in capsys.readouterr().out


def test_merge_reads_one_parquet_table_too(fx, tmp_path: Path) -> None:  # noqa: ANN001
    d = fx.write(tmp_path / "profile")
    host = _host_trace(fx, tmp_path / "host.pt.trace.json")
    out = tmp_path / "merged.json"
    assert main(["merge", str(host), str(d / "SystemProfileEvents.parquet"), "-o", str(out)]) == 0
    t = load_trace(out)
    assert int((t.columns[S.PH] == S.Phase.COUNTER).sum()) == 0  # only the events table given


def test_analyze_several_ranks_merged_on_the_fly(fx, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    for rank in (0, 1):
        r = tmp_path / "run" / f"rank{rank}"
        fx.write(r / "profile")
        _host_trace(fx, r / f"rank{rank}.pt.trace.json", rank)
    assert main(["analyze", "--json", "-j", "1", str(tmp_path / "run")]) == 0
    doc = json.loads(capsys.readouterr().out)
    reports = doc["reports"] if "reports" in doc else doc["traces"]
    assert len(reports) == 2  # the host traces are merged into the profiles, not analysed alone
    text = json.dumps(reports)
    assert "NeuronCore 0 (i-0synthetic00000001" in text


def test_diff_reads_rank_directories_of_profiles_as_analyze_does(
    fx, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    """diff listed a directory its own way: the host trace beside a profile was a trace of its
    own (no device events) and the profile's files were not merged. Both commands now read a
    directory with explorer.inputs.traces_under: one input per rank, the profile merged on its
    host trace, paired by that trace's rank."""
    for side in ("a", "b"):
        for rank in (1, 0):
            r = tmp_path / side / f"rank{rank}"
            fx.write(r / "profile")
            host = _host_trace(fx, r / f"rank{rank}.pt.trace.json", rank)
            doc = json.loads(host.read_text())  # Kineto writes distributedInfo before the events
            host.write_text(json.dumps({"distributedInfo": doc.pop("distributedInfo"), **doc}))
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pairing"]["by"] == "rank", doc["pairing"]
    assert [p["rank"] for p in doc["pairs"]] == [0, 1]
    assert [p["a"] for p in doc["pairs"]] == [
        str(tmp_path / "a" / f"rank{r}" / f"rank{r}.pt.trace.json") for r in (0, 1)
    ]
    assert doc["a"]["devices"] == 2  # the profile's NeuronCores, merged on the host trace


def test_native_pytorch_output_reads_the_framework_trace_and_skips_binaries(
    fx, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    d = tmp_path / "native"
    d.mkdir()
    _host_trace(fx, d / "neuron_framework_trace_rank_0.json")
    for name in ("ntrace.pb", "trace_info.pb", "profile_nc_0_session_1.ntff"):
        (d / name).write_bytes(b"\x08\x96\x01 not public")
    assert main(["export", str(d), "-o", str(tmp_path / "f.json")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all("skipped" in line and "not public" in line for line in err)
    assert {Path(line.split(": ")[2]).name for line in err} == {
        "ntrace.pb",
        "trace_info.pb",
        "profile_nc_0_session_1.ntff",
    }
    t = load_trace(tmp_path / "f.json")
    assert int((t.columns[S.KIND] == S.EventKind.CPU_OP).sum()) == FRAMEWORK_EVENTS
    assert main(["analyze", str(d)]) == 0


# -- bad input: one line naming the file, exit 2 --------------------------------------------------
def _bad_profiles(fx, root: Path) -> dict[str, tuple[Path, Path]]:  # noqa: ANN001
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = fx.write(root / "good")
    events = good / "SystemProfileEvents.parquet"
    out = {}
    cut = root / "cut"
    cut.mkdir()
    data = events.read_bytes()
    (cut / events.name).write_bytes(data[: len(data) // 2])
    out["truncated"] = (cut, cut / events.name)
    junk = root / "junk"
    junk.mkdir()
    (junk / events.name).write_bytes(np.random.default_rng(1).bytes(5000))
    out["not parquet"] = (junk, junk / events.name)
    table = pq.read_table(events)
    no_col = root / "nocol"
    no_col.mkdir()
    pq.write_table(table.drop(["start_ts"]), no_col / events.name)
    out["missing column"] = (no_col, no_col / events.name)
    typed = root / "typed"
    typed.mkdir()
    i = table.column_names.index("start_ts")
    pq.write_table(
        table.set_column(i, "start_ts", table["start_ts"].cast(pa.string())), typed / events.name
    )
    out["wrong type"] = (typed, typed / events.name)
    hbm_only = good / "SystemProfileHbmUsage.parquet"
    out["missing table"] = (hbm_only, hbm_only)
    return out


@pytest.mark.parametrize(
    "case", ["truncated", "not parquet", "missing column", "wrong type", "missing table"]
)
def test_bad_parquet_is_one_line_and_exit_2(fx, tmp_path: Path, case: str, capsys) -> None:  # noqa: ANN001
    """Through the entry point's ``main`` in this process (an exception would fail the test
    as the traceback a user would see)."""
    given, named = _bad_profiles(fx, tmp_path)[case]
    for argv in (
        ["export", str(given), "-o", str(tmp_path / "o.json")],
        [
            "merge",
            str(_host_trace(fx, tmp_path / "h.pt.trace.json")),
            str(given),
            "-o",
            str(tmp_path / "m.json"),
        ],
    ):
        capsys.readouterr()
        code = main(argv)
        stderr = capsys.readouterr().err
        lines = stderr.strip().splitlines()
        assert code == 2, stderr
        assert len(lines) == 1 and str(named) in lines[0], stderr
        assert not (tmp_path / "o.json").exists() and not (tmp_path / "m.json").exists()


def test_parquet_without_pyarrow_says_what_to_install(fx, tmp_path: Path) -> None:  # noqa: ANN001
    d = fx.write(tmp_path / "profile")
    code = (
        "import sys\n"
        "for m in ('pyarrow', 'pyarrow.compute', 'pyarrow.parquet'): sys.modules[m] = None\n"
        "from neuron_profiler.cli.main import main\n"
        f"sys.exit(main(['export', {str(d)!r}, '-o', {str(tmp_path / 'o.json')!r}]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1, r.stderr
    assert str(d) in lines[0] and "pip install 'neuron-profiler[explorer]'" in lines[0]


def test_diff_takes_a_profile_directly(fx, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """`neuron-prof diff` reads an Explorer profile as `analyze` does (merged on the fly with
    the host trace beside it): a profile against a copy of itself changes nothing, and its
    device work is in the rows (not a host-only comparison)."""
    for side in ("a", "b"):
        fx.write(tmp_path / side / "profile")
        _host_trace(fx, tmp_path / side / "host.pt.trace.json")
    a, b = tmp_path / "a" / "profile", tmp_path / "b" / "profile"
    assert main(["diff", "--json", str(a), str(b)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["a"]["step_ms"] == doc["b"]["step_ms"] > 0
    assert doc["delta_ms"] == 0 and doc["rows"]
    assert all(r["delta_ms"] == 0 for r in doc["rows"])
    assert doc["a"]["devices"] > 0  # the profile's NeuronCores, merged in
    assert sum(r["a_parts_ms"]["device"] for r in doc["rows"]) > 0


def test_tensorboard_shows_a_host_trace_with_the_profile_beside_it_merged(
    fx,  # noqa: ANN001
    tmp_path: Path,
    capsys,  # noqa: ANN001
) -> None:
    """The plugin lists the host trace; its report is that of the profile merged on the fly,
    exactly `neuron-prof analyze PROFILE_DIR --json`, with the NeuronCores' device work."""
    from tb_plugin_client import ROUTE, ids, make_plugin

    fx.write(tmp_path / "run1" / "profile")
    _host_trace(fx, tmp_path / "run1" / "w.pt.trace.json")
    _, client = make_plugin(tmp_path)
    got = client.get(f"{ROUTE}/report", query_string=ids(client, "run1", "w"))
    assert got.status_code == 200, got.get_json()
    shown = got.get_json()["traces"][0]
    assert main(["analyze", "--json", str(tmp_path / "run1" / "profile")]) == 0
    cli = json.loads(capsys.readouterr().out)["traces"][0]
    shown.pop("source"), cli.pop("source")
    assert shown == cli
    assert shown["has_device"] and shown["idle"]["devices"]
