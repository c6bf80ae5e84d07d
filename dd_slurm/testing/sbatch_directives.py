"""Read `#SBATCH` lines the way sbatch does (double quotes group, backslash escapes, no shell)."""

from __future__ import annotations

from typing import Optional


def split_directive(text: str) -> list[str]:
    words, current, quoted, escaped, started = [], [], False, False, False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = started = True
        elif char == '"':
            quoted = not quoted
            started = True
        elif char.isspace() and not quoted:
            if started:
                words.append("".join(current))
                current, started = [], False
        else:
            current.append(char)
            started = True
    if started:
        words.append("".join(current))
    return words


def read_directives(script: str) -> list[tuple[str, Optional[str]]]:
    """(option, value) for each `#SBATCH` line before the first command, as sbatch reads them."""
    out: list[tuple[str, Optional[str]]] = []
    for line in script.splitlines()[1:]:
        if not line.startswith("#"):
            if line.strip():
                break
            continue
        if not line.startswith("#SBATCH"):
            continue
        for word in split_directive(line[len("#SBATCH"):]):
            option, sep, value = word.partition("=")
            out.append((option, value if sep else None))
    return out
