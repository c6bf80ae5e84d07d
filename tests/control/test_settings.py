"""The user's defaults: the workspace from -w, DD_SLURM_WORKSPACE or config.toml, in that order;
partition/account/qos fill only what a plan leaves unset, checked as plan fields are."""

from __future__ import annotations

import json

import pytest

from dd_slurm.control.settings import Settings, load_settings, with_job_defaults, workspace_of
from dd_slurm.errors import InvalidInput
from dd_slurm.plan.io import parse_plan
from tests.runtime.harness import plan_data


def settings_from(tmp_path, text: str) -> Settings:
    (tmp_path / "dd-slurm").mkdir(exist_ok=True)
    (tmp_path / "dd-slurm" / "config.toml").write_text(text)
    return load_settings({"XDG_CONFIG_HOME": str(tmp_path)})


def test_the_config_file_is_found_under_xdg_or_home(tmp_path) -> None:
    """$XDG_CONFIG_HOME/dd-slurm/config.toml, else $HOME/.config/dd-slurm/config.toml; none: no defaults."""
    (tmp_path / ".config" / "dd-slurm").mkdir(parents=True)
    (tmp_path / ".config" / "dd-slurm" / "config.toml").write_text('workspace = "/shared/ws"\npartition = "gpu"\n')
    found = load_settings({"HOME": str(tmp_path)})
    assert ("/shared/ws", {"partition": "gpu"}) == (found.workspace, dict(found.job))
    assert Settings() == load_settings({"XDG_CONFIG_HOME": str(tmp_path / "nothing")})


@pytest.mark.parametrize(("text", "expected"), [
    ('workspce = "/ws"\n', "workspce: unknown key (did you mean workspace?); known: workspace, partition, account, qos"),
    ('partition = 3\n', "partition: must be a non-empty string"),
    ('qos = ""\n', "qos: must be a non-empty string"),
    ('workspace = "/ws\n', "not a dd-slurm config (Illegal character"),
])
def test_a_bad_config_file_is_one_error_naming_the_file_and_key(tmp_path, text: str, expected: str) -> None:
    """Unknown keys (with a did-you-mean), wrong types and TOML syntax errors name the file."""
    with pytest.raises(InvalidInput) as err:
        settings_from(tmp_path, text)
    assert str(err.value).startswith(f"{tmp_path / 'dd-slurm' / 'config.toml'}: {expected}")


@pytest.mark.parametrize(("option", "environ", "from_file", "expected"), [
    ("/a", {"DD_SLURM_WORKSPACE": "/b"}, "/c", "/a"),
    (None, {"DD_SLURM_WORKSPACE": "/b"}, "/c", "/b"),
    (None, {}, "/c", "/c"),
])
def test_the_workspace_comes_from_the_option_then_the_environment_then_the_file(option, environ, from_file,
                                                                               expected) -> None:
    """-w wins over DD_SLURM_WORKSPACE, which wins over the file."""
    assert expected == workspace_of(option, environ, Settings(workspace=from_file))


def test_no_workspace_anywhere_says_the_three_ways_to_give_one() -> None:
    """Neither -w, nor the variable, nor the file: one error naming all three."""
    with pytest.raises(InvalidInput, match=r"no workspace: pass -w DIR, set DD_SLURM_WORKSPACE, or set workspace in"):
        workspace_of(None, {}, Settings())


def test_job_defaults_fill_only_unset_fields_and_are_checked(tmp_path) -> None:
    """partition from the file fills the plan's unset one; the plan's own account stays; a value
    a plan field would refuse is refused naming the file's key."""
    data = plan_data()
    data["job"]["account"] = "mine"
    data["job"].pop("partition", None)
    plan = parse_plan(json.dumps(data))
    filled = with_job_defaults(plan, settings_from(tmp_path, 'partition = "gpu"\naccount = "site"\n'))
    assert ("gpu", "mine", None) == (filled.job.partition, filled.job.account, filled.job.qos)
    with pytest.raises(InvalidInput, match=r"config.toml: qos: "):
        with_job_defaults(plan, settings_from(tmp_path, 'qos = "a b\\nc"\n'))
