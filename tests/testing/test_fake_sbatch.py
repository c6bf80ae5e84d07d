"""The fake sbatch settles options and the job's environment the way sbatch(1) does."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from dd_slurm.testing.fake_slurm.tools import batch_options, job_environment

BODY = 'echo "FWD=${FWD-unset} SET=${SET-unset} OTHER=${OTHER-unset} GONE=${GONE-unset} NAME=$SLURM_JOB_NAME"'


def sbatch_in(directory: Path, bin_dir: Path, env: dict[str, str], *directives: str) -> str:
    """Submit a script from `directory` (the job's working directory); the job id."""
    script = directory / "job.sh"
    script.write_text("\n".join(["#!/bin/bash", *(f"#SBATCH {d}" for d in directives), BODY]) + "\n")
    out = subprocess.run([str(bin_dir / "sbatch"), "--parsable", str(script)], cwd=directory, env=env,
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


def job_output(path: Path, seconds: float = 20) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never got the job's output")


@pytest.mark.parametrize(("directives", "environ", "expected"), [
    ([("--job-name", "d")], {}, {"--job-name": "d"}),
    ([("--job-name", "d")], {"SBATCH_JOB_NAME": "e"}, {"--job-name": "e"}),
    ([("--time", "1:00")], {"SBATCH_TIMELIMIT": "2:00", "SBATCH_NODES": "3"}, {"--time": "2:00"}),
    ([("--no-requeue", None)], {"SBATCH_EXPORT": "NONE"}, {"--no-requeue": None, "--export": "NONE"}),
])
def test_sbatch_variables_override_directives(directives, environ, expected) -> None:
    """SBATCH_* variables override `#SBATCH` lines; names sbatch does not read (SBATCH_NODES) do nothing."""
    assert expected == batch_options(directives, environ)


@pytest.mark.parametrize(("export", "expected"), [
    ("FWD,SET=1", {"FWD": "f", "SET": "1", "SLURM_CONF": "c"}),
    ("FWD,GONE", {"FWD": "f", "SLURM_CONF": "c"}),
    ("NONE", {"SLURM_CONF": "c"}),
    (None, {"FWD": "f", "OTHER": "o", "SLURM_CONF": "c"}),
])
def test_export_list_takes_bare_names_from_the_environment(export, expected) -> None:
    """--export: NAME=value as written, a bare NAME with its value from sbatch's environment (an
    unset one is skipped), SLURM_* always; no --export is ALL."""
    assert expected == job_environment(export, {"FWD": "f", "OTHER": "o", "SLURM_CONF": "c"})


@pytest.mark.timeout(60)
def test_job_output_lands_in_the_submit_directory(fake_slurm, tmp_path) -> None:
    """Without --output the job writes slurm-<id>.out into the directory sbatch ran in; a forwarded
    name carries the submitter's value and SBATCH_JOB_NAME beats the script's --job-name."""
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": f"{fake_slurm.bin_dir}:/usr/bin:/bin", "FWD": "forwarded", "OTHER": "other",
           "SBATCH_JOB_NAME": "from-env"}
    job = sbatch_in(work, fake_slurm.bin_dir, env, "--job-name=from-script", '--export="FWD,SET=1,GONE"')
    assert "FWD=forwarded SET=1 OTHER=unset GONE=unset NAME=from-env\n" == job_output(work / f"slurm-{job}.out")
    assert not (Path(os.getcwd()) / f"slurm-{job}.out").exists()
