"""The repository stands alone: no module, doc, bench, script or test points at the background
notes that sit next to the checkout (they do not ship); what the code relies on from outside is
described in docs/ with its public sources. Tests may read real traces from ../shared/traces (test
data read in place); pointing at the notes is what is refused. Every ``docs/<name>.md`` a file
names must exist, so a pointer moved into the repo cannot dangle either."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKED = ("neuron_profiler/", "docs/", "bench/", "scripts/", "tests/")
CHECKED_FILES = ("README.md", "pyproject.toml")
# Spelled in two pieces so that this file does not match itself.
OUTSIDE_NOTES = "shared" + "/docs"
DOC_POINTER = re.compile(r"(?<![\w./-])docs/[\w-]+\.md")


def _repo_files() -> list[str]:
    """Tracked files plus new ones not ignored (git), else a walk of the checked folders."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        names = out.splitlines()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked sdist)
        names = [
            p.relative_to(REPO_ROOT).as_posix()
            for p in REPO_ROOT.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    return sorted(n for n in names if n.startswith(CHECKED) or n in CHECKED_FILES)


def _text(name: str) -> str | None:
    path = REPO_ROOT / name
    if not path.is_file():  # deleted in the work tree, not yet in the index
        return None
    data = path.read_bytes()
    return None if b"\0" in data[:8192] else data.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    files = {n: t for n in _repo_files() if (t := _text(n)) is not None}
    assert any(n.startswith("neuron_profiler/") for n in files), "no package files found"
    return files


def test_nothing_points_at_the_notes_outside_the_repo(texts: dict[str, str]) -> None:
    offenders = [
        f"{name}:{i}: {line.strip()}"
        for name, text in texts.items()
        if OUTSIDE_NOTES in text
        for i, line in enumerate(text.splitlines(), 1)
        if OUTSIDE_NOTES in line
    ]
    assert not offenders, (
        "these lines point outside the repository; describe what they rely "
        "on in docs/ (with public sources) and point there:\n" + "\n".join(offenders)
    )


def test_every_doc_pointer_names_an_existing_doc(texts: dict[str, str]) -> None:
    missing = sorted(
        {
            f"{name}: {ref}"
            for name, text in texts.items()
            for ref in DOC_POINTER.findall(text)
            if not (REPO_ROOT / ref).is_file()
        }
    )
    assert not missing, "pointers to docs that do not exist:\n" + "\n".join(missing)


def test_the_check_sees_a_pointer() -> None:
    """The needle is the one the notes' paths contain, and the doc pattern finds real pointers."""
    assert OUTSIDE_NOTES in "see ../" + "shared" + "/docs/trainium.md"
    assert DOC_POINTER.findall("see docs/chips.md and docs/runtime-events.md.") == [
        "docs/chips.md",
        "docs/runtime-events.md",
    ]
    assert DOC_POINTER.findall("https://example.org/docs/a.md ../x/docs/b.md") == []
