"""procfs: the one reader of /proc/PID/stat and the one walker of the process tree on nodes."""

from __future__ import annotations

import os

from dd_slurm.runtime.node.procfs import ancestors, descendants, parse_stat, process_table, start_time

STAT = "4242 (a (b) c) S 17 4242 4200 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615"


def _row(ppid: int) -> dict:
    return {"comm": "x", "ppid": ppid, "pgid": 0, "sid": 0, "start_time": 0}


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    """The fields are read after the last ')': name, parent, group, session and start ticks."""
    expected = {"comm": "a (b) c", "ppid": 17, "pgid": 4242, "sid": 4200, "start_time": 987654}
    assert expected == parse_stat(STAT)


def test_this_process_is_in_the_table_with_its_parent_and_start_time() -> None:
    """One pass over /proc holds this process, its real parent, and the start time start_time() reads."""
    row = process_table()[os.getpid()]
    assert (os.getppid(), start_time(os.getpid())) == (row["ppid"], row["start_time"])


def test_descendants_follow_parent_pids_down_through_every_generation() -> None:
    """Children and grandchildren of the roots, not the roots, not unrelated processes; a loop ends."""
    table = {10: _row(1), 11: _row(10), 12: _row(11), 20: _row(1), 30: _row(31), 31: _row(30)}
    assert ({11, 12}, {30, 31}) == (descendants({10}, table), descendants({30}, table))


def test_ancestors_walk_up_to_the_first_pid_outside_the_table() -> None:
    """A pid and its parents while they are in the table; a parent loop ends the walk."""
    table = {12: _row(11), 11: _row(10), 10: _row(1), 30: _row(31), 31: _row(30)}
    assert ({12, 11, 10}, {30, 31}) == (ancestors(12, table), ancestors(30, table))
