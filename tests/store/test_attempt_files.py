"""One module names the attempt dir's files; the few places that cannot import it (code that runs
before the bundle is verified, scripts run outside the package) keep copies that must agree."""

from __future__ import annotations

from pathlib import Path

from dd_slurm.bundle import entry
from dd_slurm.store import attempt_files as files
from dd_slurm.testing import fault_server


def test_entry_names_the_files_as_the_runtime_does() -> None:
    """entry.py's refusal record lands where the runtime and `inspect` look: its journal, lock and
    cleanup report names are attempt_files' names."""
    expected = {name: getattr(files, name) for name in entry.ATTEMPT_FILES}
    assert expected == entry.ATTEMPT_FILES


def test_fault_server_reads_the_supervisor_record_the_runtime_writes() -> None:
    """The fault server (run as a script, outside the package) reads supervisor.json by its own copy of the name."""
    assert files.SUPERVISOR == fault_server.SUPERVISOR_RECORD


def test_on_node_commands_may_import_the_names() -> None:
    """The on-node launcher and leftover scan import attempt_files, so it is among the modules
    on-node commands verify and may import."""
    assert "dd_slurm.store.attempt_files" in entry.NODE_MODULES


def test_the_launcher_records_where_the_supervisor_reads() -> None:
    """stepexec writes next to the spec it was given (`started_of`); the step runner and the
    leftover scan read `step_started`: the same file, matched by the scan's glob."""
    spec = files.step_spec("/ws/attempts/a", "deploy-big-0")
    started = files.step_started("/ws/attempts/a", "deploy-big-0")
    assert (started, True) == (files.started_of(spec), started.match(f"*{files.STARTED_SUFFIX}"))
    assert Path("/ws/attempts/a/logs/client.log") == files.step_log("/ws/attempts/a", "client")
