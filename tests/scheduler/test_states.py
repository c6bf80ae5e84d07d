"""Scheduler states are a str Enum that call sites may still treat as plain strings."""

from __future__ import annotations

import json

from dd_slurm.scheduler.states import TERMINAL, VOCABULARY, JobState, is_terminal, normalize_state


def test_a_state_is_its_plain_string_everywhere_a_string_goes() -> None:
    """Equal, hashed, printed, formatted and dumped as its value."""
    state, _detail = normalize_state("CANCELLED by 0")
    assert (JobState.CANCELLED, True, "cancelled", "cancelled  |", '"cancelled"', 1) == (
        state, state == "cancelled", str(state), f"{state:<10} |", json.dumps(state), {"cancelled": 1}[state])


def test_the_vocabulary_is_the_enum_and_terminal_states_are_in_it() -> None:
    """Every state word is a member; terminal ones answer is_terminal, plain strings too."""
    assert (16, True, True, False) == (
        len(VOCABULARY), TERMINAL <= set(VOCABULARY), is_terminal("lost"), is_terminal("accounting_lag"))
