"""The alignment's array code (``align._keys``, ``_by_occurrence``, ``first_occurrence``,
``_mappings``, ``_both_sides``) against hand-worked cases and a plain-Python reference: one loop over difflib's
opcodes, a dict of keys in the order they first occur (what the array code must reproduce,
key numbering included)."""

from __future__ import annotations

import random
from difflib import SequenceMatcher

import numpy as np

from neuron_profiler.analysis import align as A
from neuron_profiler.analysis.align import FUSED, MATCHED, UNMATCHED, AlignKey


def reference_keys(
    segments: list[tuple[list[int], list[int], int]], words: list[str], sequence: bool
) -> tuple[list[AlignKey], list[int], list[int]]:
    """Per segment (A's unit names, B's, label id): difflib's opcodes (or the k-th unit of a
    name with the k-th), each unit's key, keys numbered as first met."""
    keys: dict[AlignKey, int] = {}
    unit_a: list[int] = []
    unit_b: list[int] = []
    for a, b, label in segments:
        lab = words[label]
        ka, kb = [-1] * len(a), [-1] * len(b)
        if sequence:
            codes = SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
        else:
            codes = reference_occurrence(a, b)
        for tag, i1, i2, j1, j2 in codes:
            if tag == "equal":
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                    ka[i] = kb[j] = keys.setdefault(
                        AlignKey(MATCHED, lab, words[a[i]], ""), len(keys)
                    )
            elif tag == "replace":
                k = keys.setdefault(
                    AlignKey(FUSED, lab, listed(words, a[i1:i2]), listed(words, b[j1:j2])),
                    len(keys),
                )
                ka[i1:i2] = [k] * (i2 - i1)
                kb[j1:j2] = [k] * (j2 - j1)
            else:
                for i in range(i1, i2):
                    ka[i] = keys.setdefault(AlignKey(UNMATCHED, lab, words[a[i]], ""), len(keys))
                for j in range(j1, j2):
                    kb[j] = keys.setdefault(AlignKey(UNMATCHED, lab, "", words[b[j]]), len(keys))
        unit_a += ka
        unit_b += kb
    return list(keys), unit_a, unit_b


def listed(words: list[str], ids: list[int]) -> str:
    seen = list(dict.fromkeys(words[i] for i in ids))
    more = f" (+{len(seen) - 3})" if len(seen) > 3 else ""
    return " + ".join(seen[:3]) + more


def reference_occurrence(a: list[int], b: list[int]) -> list[tuple[str, int, int, int, int]]:
    seen_a: dict[int, int] = {}
    where_b: dict[tuple[int, int], int] = {}
    seen_b: dict[int, int] = {}
    for j, n in enumerate(b):
        where_b[(n, seen_b.get(n, 0))] = j
        seen_b[n] = seen_b.get(n, 0) + 1
    out, used = [], set()
    for i, n in enumerate(a):
        k = seen_a.get(n, 0)
        seen_a[n] = k + 1
        j = where_b.get((n, k))
        if j is None:
            out.append(("delete", i, i + 1, 0, 0))
        else:
            used.add(j)
            out.append(("equal", i, i + 1, j, j + 1))
    return out + [("insert", 0, 0, j, j + 1) for j in range(len(b)) if j not in used]


def vectorised_keys(
    segments: list[tuple[list[int], list[int], int]], words: list[str], sequence: bool
) -> tuple[list[AlignKey], list[int], list[int]]:
    """The same through align's opcode arrays, segments laid end to end as align does."""
    pieces, names_a, names_b = [], [], []
    for a, b, label in segments:
        codes = A._opcodes(np.array(a, np.int64), np.array(b, np.int64), sequence)
        at = codes + np.array([0, len(names_a), len(names_a), len(names_b), len(names_b)])
        pieces.append(np.column_stack((at, np.full(len(codes), label))))
        names_a += a
        names_b += b
    keys, unit_a, unit_b = A._keys(
        np.concatenate(pieces), np.array(names_a, np.int64), np.array(names_b, np.int64), words
    )
    return list(keys), unit_a.tolist(), unit_b.tolist()


def random_segments(rng: random.Random) -> list[tuple[list[int], list[int], int]]:
    out = []
    for label in range(rng.randint(1, 6)):
        na, nb = rng.randint(0, 40), rng.randint(0, 40)
        if na == nb == 0:
            continue
        vocab = rng.randint(1, 6)
        a = [10 + rng.randrange(vocab) for _ in range(na)]
        b = [10 + rng.randrange(vocab) for _ in range(nb)]
        out.append((a, b, label % 3))
    return out


def test_keys_match_the_plain_python_loop_on_random_segments() -> None:
    words = ["forward", "backward", "optimizer"] + [f"w{i}" for i in range(3, 10)]
    words += [f"aten::op{i}" for i in range(10)]
    rng = random.Random(26)
    for case in range(300):
        segments = random_segments(rng)
        if not segments:
            continue
        for sequence in (True, False):
            want = reference_keys(segments, words, sequence)
            got = vectorised_keys(segments, words, sequence)
            assert got == want, (case, sequence)


def test_by_occurrence_pairs_the_kth_of_each_name() -> None:
    # a: x y x z   b: y x x w x  -> x#0-b1, y#0-b0, x#1-b2, z unmatched; b3 (w), b4 (x#2) left
    got = A._by_occurrence(np.array([1, 2, 1, 3]), np.array([2, 1, 1, 4, 1])).tolist()
    assert got == [
        [A.EQUAL, 0, 1, 1, 2],
        [A.EQUAL, 1, 2, 0, 1],
        [A.EQUAL, 2, 3, 2, 3],
        [A.DELETE, 3, 4, 0, 0],
        [A.INSERT, 0, 0, 3, 4],
        [A.INSERT, 0, 0, 4, 5],
    ]


def test_first_occurrence_numbers_rows_as_first_met() -> None:
    group, first = A.first_occurrence(np.array([5, 1, 5, 1, 2]), np.array([0, 0, 0, 1, 0]))
    assert group.tolist() == [0, 1, 0, 2, 3]
    assert first.tolist() == [0, 1, 3, 4]


def test_mappings_count_ops_per_rule_and_merge_a_fallback_row_with_its_rule() -> None:
    """Three ops: a CPU-fallback row (renamed by ``cpu_fallback``), an op of the mapped name
    holding a fallback row (the same mapping, counted once more), a cuDNN convolution."""
    raw_names = ("CPU fallback: aten::bincount", "aten::bincount", "aten::cudnn_convolution")
    names = ("aten::bincount", "aten::convolution")
    table = A.OpTable(
        tree=None,  # type: ignore[arg-type]  (not read)
        node=np.arange(4),
        step=np.zeros(4, np.int64),
        label=np.zeros(4, np.int64),
        labels=("forward",),
        raw=np.array([2, 0, 1, 2]),
        raw_names=raw_names,
        name_of_raw=np.array([0, 0, 1]),
        names=names,
        rules=(("cpu_fallback",), (), ("convolution_lowering",)),
        fallback=np.array([False, True, True, False]),
    )
    got = A._mappings(table, np.arange(4))
    assert list(got.items()) == [
        (("convolution_lowering", "aten::cudnn_convolution", "aten::convolution"), 2),
        (("cpu_fallback", "CPU fallback: aten::bincount", "aten::bincount"), 2),
    ]


def test_a_mapping_on_both_sides_is_one_entry() -> None:
    conv = ("convolution_lowering", "aten::cudnn_convolution", "aten::convolution")
    foreach = ("foreach", "aten::_foreach_add_", "aten::add_")
    fallback = ("cpu_fallback", "CPU fallback: aten::bincount", "aten::bincount")
    got = A._both_sides({conv: 3, fallback: 1}, {foreach: 2, conv: 3})
    assert [(m.rule, m.side, m.a_ops, m.b_ops, m.ops) for m in got] == [
        ("convolution_lowering", "both", 3, 3, 6),
        ("cpu_fallback", "A", 1, 0, 1),
        ("foreach", "B", 0, 2, 2),
    ]
