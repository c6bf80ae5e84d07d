"""`dd-slurm submit ATTEMPT_DIR`: submit an attempt staged earlier (`dd-slurm stage`), once."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dd_slurm.clock import Clock
from dd_slurm.errors import AttemptDirError, InvalidInput
from dd_slurm.scheduler.commands import SlurmCommands
from dd_slurm.store import attempt_files as files
from dd_slurm.store.attempt_record import update_record


def claim(attempt_dir: Path, clock: Clock) -> dict[str, Any]:
    """Mark the attempt as being submitted, under the record's lock, so that two `submit`s of one
    dir cannot both reach sbatch. An attempt already submitted (or being submitted) is refused."""
    from dd_slurm.machine.journal import current_state, read_journal

    state = current_state(read_journal(attempt_dir / files.JOURNAL), "staged")
    with update_record(attempt_dir) as record:
        if record.get("job_id"):
            raise InvalidInput(f"{attempt_dir}: already submitted as job {record['job_id']}; "
                               "stage a new attempt (submit the plan) to run it again")
        if record.get("submit_started_at") or state != "staged":
            raise InvalidInput(f"{attempt_dir}: a submission was already started (state {state}); "
                               f"look for job {record.get('job_name')} with squeue --name")
        record["submit_started_at"] = clock.wall()
        return dict(record)


def submit_staged(attempt_dir: str, workspace: str, commands: SlurmCommands, clock: Clock,
                  environ: Mapping[str, str]) -> dict[str, Any]:
    from dd_slurm.bundle.stage import workspace_path
    from dd_slurm.plan.io import load_plan
    from dd_slurm.scheduler.render import forwarded_values
    from dd_slurm.store.view import attempt_dir as checked_dir

    directory = checked_dir(attempt_dir).resolve()
    if directory.parent != (workspace_path(workspace) / "attempts").resolve():
        raise InvalidInput(f"{attempt_dir}: not an attempt of workspace {workspace}")
    if not (directory / files.SCRIPT).is_file():
        raise AttemptDirError(f"{attempt_dir}: no {files.SCRIPT} (not staged by dd-slurm?)")
    forward = forwarded_values(load_plan(directory / files.PLAN), environ)
    record = claim(directory, clock)
    started = record.get("submit_started_at") or clock.wall()
    try:
        done = commands.submit(directory / files.SCRIPT, record["job_name"], forward, since=started)
    except Exception as err:
        from dd_slurm.errors import SubmissionUnknown

        with update_record(directory) as fresh:
            if not isinstance(err, SubmissionUnknown):  # no job was created: free the claim
                fresh.pop("submit_started_at", None)
            fresh["submit_error"] = str(err)
        raise
    with update_record(directory) as fresh:
        fresh.update(done.record_fields(started))
    return done.answer(str(directory))
