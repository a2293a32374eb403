"""``neuron-prof diff``: JSON valid against the shipped schema with the invariant in it, the
terminal table and waterfall within the piped width, ``--fail-on`` with % thresholds (exit
1), ``--steps`` and ``--map``, rank directories, and bad input as one line naming the file
(exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from diff_timeline import BASE, Op, build

from neuron_profiler.cli.main import main
from neuron_profiler.exporters.chrome import write_chrome_trace
from neuron_profiler.reports.diff_json import SCHEMA_VERSION, schema_text
from neuron_profiler.reports.terminal import PIPED_WIDTH

SLOW = [*BASE[:2], Op("aten::linear", 10, 150), *BASE[3:]]  # +50 µs a step


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture()
def pair(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_chrome_trace(build(BASE)[0], a)
    write_chrome_trace(build(SLOW)[0], b)
    return a, b


def test_json_validates_and_holds_the_invariant(pair, capsys) -> None:  # noqa: ANN001
    code, out, _ = run(["diff", *map(str, pair), "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads(schema_text()))
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["a"]["source"] == str(pair[0]) and doc["b"]["steps"] == ["1", "2", "3"]
    assert doc["delta_ms"] == pytest.approx(0.050, abs=1e-6)
    assert sum(r["delta_ms"] for r in doc["rows"]) + doc["residual_ms"] == pytest.approx(
        doc["delta_ms"], abs=1e-5
    )
    top = doc["rows"][0]
    assert (top["key"], top["kind"]) == ("forward › aten::linear", "op")
    assert top["b_parts_ms"]["device"] - top["a_parts_ms"]["device"] == pytest.approx(0.05)


def test_terminal_shows_table_and_waterfall_within_the_piped_width(pair, capsys) -> None:  # noqa: ANN001
    code, out, _ = run(["diff", *map(str, pair)], capsys)
    assert code == 0
    assert "Where the time went" in out and "Waterfall" in out
    assert "forward › aten::linear" in out
    assert max(len(line) for line in out.splitlines()) <= PIPED_WIDTH


def test_fail_on_percent_of_a_step(pair, capsys) -> None:  # noqa: ANN001
    a, b = map(str, pair)
    step_ms = json.loads(run(["diff", a, b, "--json"], capsys)[1])["a"]["step_ms"]
    pct = 100 * 0.050 / step_ms
    code, _, err = run(["diff", a, b, "--fail-on", f"delta_ms>{pct * 0.9:.3f}%"], capsys)
    assert code == 1 and "fail-on: delta_ms>" in err and "breached" in err
    assert run(["diff", a, b, "--fail-on", f"delta_ms>{pct * 1.1:.3f}%"], capsys)[0] == 0
    assert run(["diff", a, b, "--fail-on", "delta_ms>0.049"], capsys)[0] == 1
    assert run(["diff", b, a, "--fail-on", "delta_ms>0"], capsys)[0] == 0  # (faster)


@pytest.mark.parametrize(
    ("rule", "says"),
    [("delta_ms>>5", "expected METRIC OP NUMBER"), ("idle_pct>5", "unknown metric")],
)
def test_a_bad_rule_is_exit_2(pair, capsys, rule: str, says: str) -> None:  # noqa: ANN001
    code, _, err = run(["diff", *map(str, pair), "--fail-on", rule], capsys)
    assert code == 2 and says in err


def test_analyze_rules_take_no_percent(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    path = tmp_path / "a.json"
    write_chrome_trace(build(BASE)[0], path)
    code, _, err = run(["analyze", str(path), "--fail-on", "idle_pct>5%"], capsys)
    assert code == 2 and "idle_pct>30" in err


def test_steps_option(pair, capsys) -> None:  # noqa: ANN001
    doc = json.loads(run(["diff", *map(str, pair), "--json", "--steps", "2-3"], capsys)[1])
    assert doc["a"]["steps"] == ["2", "3"] and doc["steps_by"] == "number"
    code, _, err = run(["diff", *map(str, pair), "--steps", "7"], capsys)
    assert code == 2 and "step 7 not in both" in err


def test_steps_backwards_range_is_refused(pair, capsys) -> None:  # noqa: ANN001
    """``3-2`` once parsed to no step at all, which fell back to comparing every step."""
    code, out, err = run(["diff", *map(str, pair), "--json", "--steps", "3-2"], capsys)
    assert (code, out) == (2, "") and "range 3-2 runs backwards" in err


def test_steps_huge_range_costs_nothing_and_stays_one_short_line(pair, capsys) -> None:  # noqa: ANN001
    """``0-1000000000`` once built a billion-number list (memory exhausted); the error names
    the first missing steps and counts the rest."""
    code, _, err = run(["diff", *map(str, pair), "--steps", "0-1000000000"], capsys)
    assert code == 2 and len(err.splitlines()) == 1 and len(err) < 300
    missing = 1_000_000_001 - 3  # the pair's steps are 1, 2 and 3
    assert f"step 0, 4, 5, 6, 7, 8, 9, 10, 11, 12 and {missing - 10} more not in both" in err
    doc = json.loads(run(["diff", *map(str, pair), "--json", "--steps", "3,1-2,2"], capsys)[1])
    assert doc["a"]["steps"] == ["1", "2", "3"] and doc["b"]["steps"] == ["1", "2", "3"]


@pytest.mark.parametrize("value", ["nan", "inf", "-nan"])
def test_min_gap_must_be_finite(pair, capsys, value: str) -> None:  # noqa: ANN001
    """click's FloatRange lets nan/inf through: they ended in a traceback converting to ns."""
    for command in (["diff", *map(str, pair)], ["analyze", str(pair[0])]):
        code, out, err = run([*command, "--min-gap", value], capsys)
        assert code == 2 and "--min-gap" in err and "Traceback" not in err + out


def test_user_map_renames_before_matching(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_chrome_trace(build(BASE)[0], a)
    renamed = [Op("my::fast_linear", 10, 100) if o.name == "aten::linear" else o for o in BASE]
    write_chrome_trace(build(renamed)[0], b)
    rules = tmp_path / "map.json"
    rules.write_text(
        json.dumps(
            {"rules": [{"name": "mine", "pattern": "my::fast_(.*)", "replace": "aten::\\1"}]}
        )
    )
    from neuron_profiler.analysis.diff import diff
    from neuron_profiler.analysis.name_map import NameMap
    from neuron_profiler.trace import load_trace

    ta, tb = load_trace(a), load_trace(b)
    assert {r.kind for r in diff(ta, tb).rows} >= {"fused"}  # linear ≈ my::fast_linear
    mine = diff(ta, tb, names=NameMap.load(rules))
    assert "fused" not in {r.kind for r in mine.rows}
    mapped = json.loads(run(["diff", str(a), str(b), "--json", "--map", str(rules)], capsys)[1])
    assert {m["rule"] for m in mapped["mappings"]} >= {"mine"}
    assert all(abs(r["delta_ms"]) < 1e-9 for r in mapped["rows"])


def _rank_dirs(tmp_path: Path, ranks: dict[str, tuple[int | None, ...]]) -> tuple[Path, Path]:
    """Two rank directories: files r0.json, r1.json on each side, with the given
    distributedInfo ranks (None: none); on B, the file of rank 1 (or r1.json) is SLOW."""
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        for i, rank in enumerate(ranks[side]):
            slow = side == "b" and (rank == 1 if rank is not None else i == 1)
            trace = build(SLOW if slow else BASE)[0]
            if rank is not None:
                trace.metadata["distributedInfo"] = {
                    "backend": "gloo",
                    "rank": rank,
                    "world_size": 2,
                }
            write_chrome_trace(trace, tmp_path / side / f"r{i}.json")
    return tmp_path / "a", tmp_path / "b"


def test_rank_directories_are_paired_by_rank(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """A's ranks are in the reverse of name order: rank 1 of A (r0.json) meets rank 1 of B
    (r1.json, the slow one), and the report says so."""
    a, b = _rank_dirs(tmp_path, {"a": (1, 0), "b": (0, 1)})
    doc = json.loads(run(["diff", str(a), str(b), "--json"], capsys)[1])
    assert doc["pairing"] == {"by": "rank", "note": ""}
    assert [(p["rank"], Path(p["a"]).name, Path(p["b"]).name) for p in doc["pairs"]] == [
        (0, "r1.json", "r0.json"),
        (1, "r0.json", "r1.json"),
    ]
    assert doc["a"]["source"].endswith("a/r0.json")  # the pair that changed most: rank 1
    assert doc["delta_ms"] == pytest.approx(0.05, abs=1e-6)
    out = run(["diff", str(a), str(b)], capsys)[1]
    assert "2 rank pairs paired by rank" in out


def test_rank_directories_skip_json_files_that_are_no_traces(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """A capture directory also holds the capture's status files: they are skipped (one
    warning each), not paired with a rank or loaded as a trace."""
    a, b = _rank_dirs(tmp_path, {"a": (0, 1), "b": (0, 1)})
    (a / "1234.status.json").write_text('{"state": "done", "trace": "r0.json"}')
    code, out, err = run(["diff", str(a), str(b), "--json"], capsys)
    assert code == 0, err
    assert [Path(p["a"]).name for p in json.loads(out)["pairs"]] == ["r0.json", "r1.json"]
    assert "1234.status.json: skipped, not a trace" in err


def test_rank_directories_without_ranks_pair_in_name_order(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    a, b = _rank_dirs(tmp_path, {"a": (None, None), "b": (0, 1)})
    doc = json.loads(run(["diff", str(a), str(b), "--json"], capsys)[1])
    jsonschema.validate(doc, json.loads(schema_text()))
    assert doc["pairing"] == {
        "by": "name order",
        "note": "A's r0.json has no distributedInfo rank (and 1 more)",
    }
    assert [p["rank"] for p in doc["pairs"]] == [None, None]
    assert doc["a"]["source"].endswith("a/r1.json")
    assert doc["delta_ms"] == pytest.approx(0.05, abs=1e-6)


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"{not json", None), (b"", None), (b'{"traceEvents": 5}', None)],
)
def test_bad_input_is_one_line_naming_the_file(
    pair,
    tmp_path: Path,
    capsys,
    content: bytes,
    problem: str | None,  # noqa: ANN001
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    code, out, err = run(["diff", str(pair[0]), str(bad)], capsys)
    assert code == 2 and out == ""
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and str(bad) in errors[0]


def test_missing_file_and_bad_map_are_exit_2(pair, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    code, _, err = run(["diff", str(pair[0]), str(tmp_path / "nope.json")], capsys)
    assert code == 2 and "nope.json" in err
    bad_map = tmp_path / "map.json"
    bad_map.write_text('{"rules": [{"name": "x", "pattern": "(", "replace": ""}]}')
    code, _, err = run(["diff", *map(str, pair), "--map", str(bad_map)], capsys)
    assert code == 2 and str(bad_map) in err and "bad pattern" in err
    code, _, err = run(["diff", str(pair[0]), str(tmp_path)], capsys)
    assert code == 2 and "directory compared with a file" in err


def test_a_side_without_step_time_has_no_percentage(pair, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """A holds one op of no duration: its mean step is 0 ms, of which B's change is no
    percentage (not "+0.0%")."""
    empty = tmp_path / "zero.json"
    empty.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::add",
                        "pid": 1,
                        "tid": 1,
                        "ts": 0,
                        "dur": 0,
                    }
                ]
            }
        )
    )
    code, out, err = run(["diff", str(empty), str(pair[1])], capsys)
    assert code == 0, err
    assert "A has no step time" in out and "+0.0%" not in out
