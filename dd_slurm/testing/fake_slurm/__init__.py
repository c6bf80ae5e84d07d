"""Fake sbatch/squeue/sacct/scancel/scontrol/srun for fast tests, reached through DD_SLURM_BIN_DIR.

`install(bin_dir)` writes one executable per tool and a state file beside them. Jobs really run:
fake sbatch starts the script as a local process (unless held) and squeue/sacct report what
happened to it. Scriptable faults per tool: exit code, stderr, stdout (malformed output), hang.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dd_slurm.testing.fake_slurm.state import FakeSlurm

TOOLS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "srun")


def install(bin_dir: Path, python: str = sys.executable) -> FakeSlurm:
    bin_dir = Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[3]
    for tool in TOOLS:
        # -I -S: the tools need the standard library and this checkout only, and a large fake
        # allocation starts hundreds of them; srun goes straight to its own small module.
        call = ("from dd_slurm.testing.fake_slurm.fake_srun import main\nsys.exit(main(sys.argv[1:]))\n"
                if tool == "srun" else
                f"from dd_slurm.testing.fake_slurm.tools import main\nsys.exit(main({tool!r}, sys.argv[1:]))\n")
        exe = bin_dir / tool
        exe.write_text(f"#!{python} -IS\nimport sys\nsys.path.insert(0, {str(root)!r})\n{call}")
        exe.chmod(0o755)
    fake = FakeSlurm(bin_dir)
    fake.reset()
    return fake


@contextmanager
def fake_cluster(directory: str | Path) -> Iterator[FakeSlurm]:
    """The fake tools in `directory`/bin for the duration of a block; at its end every job and
    step started under `directory` is ended, as a real cluster's job end would (no server or
    gateway left behind by a benchmark)."""
    fake = install(Path(directory) / "bin")
    try:
        yield fake
    finally:
        fake.end_everything(str(directory))
