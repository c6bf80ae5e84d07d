"""The invalid-input tables of persisted records (fixtures/records/<name>-invalid.tsv): each line
a file's content, a tab, and the error it gives after the file's name."""

from __future__ import annotations

from tests.conftest import FIXTURES


def invalid_cases(name: str) -> list[tuple[str, str]]:
    lines = (FIXTURES / "records" / f"{name}-invalid.tsv").read_text().splitlines()
    return [tuple(line.split("\t")) for line in lines if line and not line.startswith("#")]  # type: ignore[misc]
