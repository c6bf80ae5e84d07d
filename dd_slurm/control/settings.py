"""The user's defaults: `~/.config/dd-slurm/config.toml` (or `$XDG_CONFIG_HOME/dd-slurm/`) and
`DD_SLURM_WORKSPACE`. The workspace comes from `-w`, else the environment, else the file;
`partition`, `account` and `qos` fill only the `job` fields a plan leaves unset, checked as the
plan's own fields are."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from dd_slurm.errors import InvalidInput

if TYPE_CHECKING:  # the plan's records are not imported by commands that never read a plan (status)
    from dd_slurm.plan.records import Plan

WORKSPACE_VARIABLE = "DD_SLURM_WORKSPACE"
JOB_DEFAULTS = ("partition", "account", "qos")
KEYS = ("workspace",) + JOB_DEFAULTS


class Settings(NamedTuple):
    """A frozen value, no attrs class: every command (a fresh `status` too) loads the settings."""

    path: Optional[Path] = None
    workspace: Optional[str] = None
    job: Mapping[str, str] = MappingProxyType({})


def config_path(environ: Mapping[str, str]) -> Optional[Path]:
    base = environ.get("XDG_CONFIG_HOME") or (f"{environ['HOME']}/.config" if environ.get("HOME") else None)
    return Path(base, "dd-slurm", "config.toml") if base else None


def load_settings(environ: Mapping[str, str]) -> Settings:
    """The settings file, strictly: unknown keys (with a did-you-mean) and values that are not
    non-empty strings are one error naming the file and the key. No file: no defaults."""
    path = config_path(environ)
    if path is None or not path.is_file():
        return Settings()
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise InvalidInput(f"{path}: reading it needs Python 3.11 or later (tomllib)") from None

    from dd_slurm.plan.fields import did_you_mean

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise InvalidInput(f"{path}: not a dd-slurm config ({err})") from None
    for key, value in data.items():
        if key not in KEYS:
            raise InvalidInput(f"{path}: {key}: unknown key{did_you_mean(key, list(KEYS))}; "
                               f"known: {', '.join(KEYS)}")
        if not isinstance(value, str) or not value:
            raise InvalidInput(f"{path}: {key}: must be a non-empty string")
    return Settings(path, data.get("workspace"), {k: data[k] for k in JOB_DEFAULTS if k in data})


def workspace_of(option: Optional[str], environ: Mapping[str, str], settings: Settings) -> str:
    """-w, else DD_SLURM_WORKSPACE, else the settings file's `workspace`."""
    chosen = option or environ.get(WORKSPACE_VARIABLE) or settings.workspace
    if not chosen:
        raise InvalidInput(f"no workspace: pass -w DIR, set {WORKSPACE_VARIABLE}, or set workspace in "
                           f"{config_path(environ) or '~/.config/dd-slurm/config.toml'}")
    return chosen


def with_job_defaults(plan: Plan, settings: Settings) -> Plan:
    """The plan with the settings' partition/account/qos where its own are unset, each value
    checked as the plan field is (an error names the settings file and key)."""
    import attrs

    from dd_slurm.plan.fields import FieldError

    missing: dict[str, Any] = {k: v for k, v in settings.job.items() if getattr(plan.job, k) is None}
    if not missing:
        return plan
    try:
        return attrs.evolve(plan, job=attrs.evolve(plan.job, **missing))
    except FieldError as err:
        raise InvalidInput(f"{settings.path}: {err.subpath.lstrip('.')}: {err.reason}") from None
