"""The op name map: names that differ only by the device or release that ran an op, brought to
one name before two traces are aligned (``align``)::

    names = NameMap.load()                        # the package's table (name_map.json)
    names = NameMap.load("my_map.json")           # a user's rules first, then the package's
    names.normalise("aten::cudnn_convolution")    # ("aten::convolution", ("convolution_lowering",))

A table is a JSON object ``{"rules": [{"name", "pattern", "replace", "why"?}, ...]}``: rules apply
in order, each to the result of the rules before it; ``pattern`` is a Python regular expression
matched against the whole name, ``replace`` its replacement (``\\1`` for a group). Each
normalised name keeps the names of the rules that changed it, so a diff can say which
mappings it used. A bad user file is one error line naming the file and the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import msgspec

from neuron_profiler.errors import NeuronProfilerError

PACKAGE_TABLE = "name_map.json"


@dataclass(frozen=True)
class NameRule:
    name: str
    pattern: re.Pattern[str]
    replace: str
    why: str = ""


class _RuleText(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    pattern: str
    replace: str
    why: str = ""


class _TableText(msgspec.Struct, forbid_unknown_fields=True):
    rules: list[_RuleText]
    about: str = ""


@dataclass(frozen=True)
class NameMap:
    """Rules in the order they apply (a user's first). ``source``: where the user's rules came
    from ("" for the package's table alone)."""

    rules: tuple[NameRule, ...]
    source: str = ""

    @classmethod
    def load(cls, user_file: str | Path | None = None) -> NameMap:
        package = _package_rules()
        if user_file is None:
            return cls(package)
        return cls(_rules(_read(Path(user_file)), str(user_file)) + package, str(user_file))

    def normalise(self, name: str) -> tuple[str, tuple[str, ...]]:
        """The name every rule in turn leaves, and the rules that changed it."""
        used: list[str] = []
        for rule in self.rules:
            if rule.pattern.fullmatch(name) is None:
                continue
            mapped = rule.pattern.sub(rule.replace, name, count=1)
            if mapped != name:
                name = mapped
                if rule.name not in used:
                    used.append(rule.name)
        return name, tuple(used)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise NeuronProfilerError(
            f"{path}: cannot read the name map ({err.strerror or err})", exit_code=2
        ) from None


def _rules(data: bytes, source: str) -> tuple[NameRule, ...]:
    try:
        table = msgspec.json.decode(data, type=_TableText)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise NeuronProfilerError(
            f"{source}: not a name map ({' '.join(str(err).split())}); expected "
            '{"rules": [{"name", "pattern", "replace"}, ...]}',
            exit_code=2,
        ) from None
    out = []
    for i, rule in enumerate(table.rules):
        try:
            pattern = re.compile(rule.pattern)
            pattern.sub(rule.replace, "")  # a bad group reference fails here, not mid-diff
        except re.error as err:
            raise NeuronProfilerError(
                f"{source}: rule {i} ({rule.name!r}): bad pattern or replacement: {err}",
                exit_code=2,
            ) from None
        out.append(NameRule(rule.name, pattern, rule.replace, rule.why))
    return tuple(out)


@lru_cache(maxsize=1)
def _package_rules() -> tuple[NameRule, ...]:
    data = resources.files("neuron_profiler.analysis").joinpath(PACKAGE_TABLE).read_bytes()
    return _rules(data, PACKAGE_TABLE)
