"""The invalid-input tables of persisted records (fixtures/records/<name>-invalid.tsv): each line
a file's content, a tab, and the error it gives after the file's name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dd_slurm.errors import AttemptDirError
from tests.conftest import FIXTURES


def invalid_cases(name: str) -> list[tuple[str, str]]:
    lines = (FIXTURES / "records" / f"{name}-invalid.tsv").read_text().splitlines()
    return [tuple(line.split("\t")) for line in lines if line and not line.startswith("#")]  # type: ignore[misc]


def refusal(path: Path, content: str, read: Callable[[Path], Any]) -> str:
    """The one-line error `read` gives for `path` holding `content` (it must refuse it)."""
    path.write_text(content)
    with pytest.raises(AttemptDirError) as caught:
        read(path)
    return str(caught.value)
