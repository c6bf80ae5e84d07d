"""The fakes stay honest: one scenario through dd-slurm's client, on fake and on real Slurm."""

from __future__ import annotations

from dd_slurm.clock import Clock
from dd_slurm.scheduler.commands import SlurmCommands
from dd_slurm.testing.fake_slurm import install
from tests.scheduler.scenario import run_scenario


def test_fake_slurm_normalizes_exactly_like_real_slurm(tmp_path, job_prefix, real_commands) -> None:
    """Held job, exit 0, exit 3, a cancelled running job and a held throttled array give the
    same normalized observations (state, terminal, exit code, signal, reason) on both."""
    (tmp_path / "real").mkdir()
    (tmp_path / "fake").mkdir()
    real = run_scenario(real_commands, tmp_path / "real", job_prefix)
    fake_slurm = install(tmp_path / "bin")
    fake = run_scenario(SlurmCommands(Clock(), str(fake_slurm.bin_dir), {}), tmp_path / "fake", job_prefix)
    assert real == fake
