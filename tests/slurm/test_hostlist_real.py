"""The hostlist corpus (fixtures/slurm/corpus/hostlist.tsv) against real `scontrol show hostnames`
on each Slurm release, and the fake Slurm's scontrol (it uses dd-slurm's expander) against the
real one on the same input."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.scheduler.test_corpus import cases

CORPUS = [tuple(case.values) for case in cases("hostlist")]
NAMES = [(text, expected) for text, expected in CORPUS if isinstance(expected, list)]
COUNTS = [(text, expected["count"]) for text, expected in CORPUS if isinstance(expected, dict)]
ERRORS = [text for text, expected in CORPUS if isinstance(expected, str)]


def hostnames(scontrol: str, hostlist: str) -> subprocess.CompletedProcess:
    return subprocess.run([scontrol, "show", "hostnames", hostlist], capture_output=True, text=True, timeout=60)


def test_corpus_names_are_real_scontrols(cluster) -> None:
    """Every listed expansion in the corpus, all in one call (a comma joins hostlists), is what
    this release's scontrol prints; the 65,536-name range expands to as many names."""
    done = hostnames(cluster.tool("scontrol"), ",".join(text for text, _ in NAMES))
    assert [name for _, names in NAMES for name in names] == done.stdout.split()
    for text, count in COUNTS:
        assert count == len(hostnames(cluster.tool("scontrol"), text).stdout.split())


# Corpus errors real scontrol does not reject everywhere: dd-slurm is stricter (a 64K cap on the
# whole list, balanced brackets only). What each release prints instead (its names; [] = rejected).
STRICTER = {
    "x[0-299]y[0-299]": {"22.05": 90000, "24.11": 90000, "26.05": 90000},
    "n1]": {"22.05": ["n1]"], "24.11": ["n1]"], "26.05": ["n1]"]},
    "n[1-3": {"22.05": ["n]"], "24.11": [], "26.05": []},
    "n[[1-2]]": {"22.05": [], "24.11": ["n[1]", "n[2]"], "26.05": ["n[1]", "n[2]"]},
}


def test_corpus_errors_are_rejected_by_real_scontrol(cluster) -> None:
    """Each hostlist the corpus calls an error, real scontrol rejects too (no names; 22.05 still
    exits 0), but for the few dd-slurm is stricter about (STRICTER), where this release prints
    what is recorded there."""
    printed = {}
    for text in ERRORS:
        names = hostnames(cluster.tool("scontrol"), text).stdout.split()
        printed[text[:40]] = len(names) if len(names) > 1000 else names
    expected = {text[:40]: STRICTER[text][cluster.version] if text in STRICTER else [] for text in ERRORS}
    assert expected == printed


def test_the_fake_scontrol_expands_as_the_real_one(cluster, tmp_path: Path) -> None:
    """The fake Slurm's `scontrol show hostnames` prints what the real one prints for the
    corpus's hostlists, and no names for the corpus's errors (where real Slurm is laxer, STRICTER)."""
    from dd_slurm.testing.fake_slurm import install

    fake = str(install(tmp_path / "bin").bin_dir / "scontrol")
    joined = ",".join(text for text, _ in NAMES)
    assert hostnames(cluster.tool("scontrol"), joined).stdout.split() == hostnames(fake, joined).stdout.split()
    assert {text[:40]: [] for text in ERRORS} == {text[:40]: hostnames(fake, text).stdout.split() for text in ERRORS}
