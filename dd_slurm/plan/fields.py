"""Checks shared by every plan field: control characters, scheduler values, placeholders."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
SURROGATE = re.compile("[\ud800-\udfff]")
IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
TIME_LIMIT = re.compile(r"(?:(\d{1,3})-)?(\d{1,2}):([0-5]\d):([0-5]\d)\Z")
MEM = re.compile(r"[1-9][0-9]{0,9}[KMGT]?\Z")
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")

CLIENT_PLACEHOLDERS = frozenset({"endpoints_file", "results_dir", "attempt_dir", "shard_index", "num_shards"})
RESULT_PLACEHOLDERS = frozenset({"shard_index", "num_shards"})  # in client.result.path: this shard's file
RESULT_FORMATS = ("jsonl", "json", "parquet", "file")
DEPLOYMENT_PLACEHOLDERS = CLIENT_PLACEHOLDERS | {"port", "host", "leader_host", "node_rank", "num_nodes", "weights"}
WEIGHT_STAGES = ("none", "node_local")
LOCAL_DIR_PLACEHOLDERS = frozenset({"node"})  # in weights.local_dir: the node's name
# Names a plan may not forward: sbatch and Slurm read them, the runtime owns them, or the loader obeys them.
FORWARD_RESERVED_PREFIXES = ("SBATCH_", "SLURM_", "DD_SLURM_", "LD_", "PYTHON")


class FieldError(ValueError):
    """A value is wrong. `subpath` is appended to the path of the field being checked."""

    def __init__(self, reason: str, subpath: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.subpath = subpath


def did_you_mean(word: str, choices: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def control_char(text: str) -> str | None:
    """The first control character in `text` as `U+XXXX`, or None."""
    found = CONTROL.search(text)
    return f"U+{ord(found.group()):04X}" if found else None


def format_char(text: str) -> str | None:
    """The first Unicode format character (category Cf: bidi overrides, zero-width) as `U+XXXX`."""
    for char in text:
        if unicodedata.category(char) == "Cf":
            return f"U+{ord(char):04X}"
    return None


def check_text(text: str) -> None:
    bad = control_char(text)
    if bad:
        raise FieldError(f"control character {bad} is not allowed")
    lone = SURROGATE.search(text)
    if lone:
        raise FieldError(f"lone surrogate U+{ord(lone.group()):04X} is not allowed")


def check_name_text(text: str) -> None:
    """Names and scheduler values: no control characters and no invisible format characters."""
    check_text(text)
    bad = format_char(text)
    if bad:
        raise FieldError(f"format character {bad} is not allowed")


def check_scheduler_value(text: str) -> None:
    check_name_text(text)
    if not text:
        raise FieldError("must not be empty")
    if text.startswith("-"):
        raise FieldError("must not start with '-'")


def placeholders(text: str) -> list[str]:
    """Names of the `{name}` placeholders in `text`; raises FieldError on a stray brace."""
    names = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in ("{{", "}}"):
            continue
        if match.group(1) is None:
            raise FieldError(f"unbalanced '{token}' (write '{token * 2}' for a literal brace)")
        names.append(match.group(1))
    return names


def check_argv_item(text: str, allowed: frozenset[str] | set[str]) -> None:
    check_text(text)
    for name in placeholders(text):
        if name not in allowed:
            raise FieldError(f"unknown placeholder {{{name}}}; allowed: {', '.join(sorted(allowed))} "
                             "(write '{{' and '}}' for literal braces, as JSON in an argument needs)")


def expand(text: str, values: Mapping[str, str]) -> str:
    """Substitute placeholders as plain text. Never evaluated by a shell."""

    def replace(match: re.Match[str]) -> str:
        token = match.group()
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        return values[match.group(1)]

    return _TOKEN.sub(replace, text)


def time_limit_seconds(text: str) -> int:
    match = TIME_LIMIT.match(text)
    if not match:
        raise FieldError('must be "HH:MM:SS" or "D-HH:MM:SS"')
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    if days == 0 and hours + minutes + seconds == 0:
        raise FieldError("must be longer than zero")
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def each(check: Callable[[str], None]) -> Callable[[Iterable[str]], None]:
    """A check applying `check` to every item of a sequence, naming the index of a failure."""

    def check_all(values: Iterable[str]) -> None:
        for index, item in enumerate(values):
            try:
                check(item)
            except FieldError as err:
                raise FieldError(err.reason, f"[{index}]{err.subpath}") from None

    return check_all
