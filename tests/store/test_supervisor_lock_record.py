"""The supervisor lock's holder record goes through the one strict converter: any holder reads
back equal, and a refused lock names the file and the wrong field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.runtime.supervision import Holder, SupervisionRefused, SupervisorLock
from dd_slurm.store.attempt_files import SUPERVISOR_LOCK
from tests.store.records_table import invalid_cases

names = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=16)


@settings(max_examples=60, deadline=None)
@given(holder=st.builds(Holder, names, names, names, names, names, names, st.integers(2, 2**22),
                        st.none() | st.integers(0, 2**63), st.floats(0, 2e9)))
def test_any_holder_reads_back_equal(holder: Holder) -> None:
    """What a supervisor writes into its lock is what the next one reads."""
    assert holder == Holder.parse(json.dumps(holder.to_json()).encode())


@pytest.mark.parametrize(("content", "expected"), invalid_cases("supervisor-lock"))
def test_a_refused_lock_names_the_file_and_field(tmp_path, content: str, expected: str) -> None:
    """Each refused lock content gives one line: the lock file, the field path, what to do."""
    (tmp_path / SUPERVISOR_LOCK).write_text(content)
    with pytest.raises(SupervisionRefused) as caught:
        SupervisorLock(tmp_path, Holder.me("run", {}), lambda job: False).acquire()
    assert (f"{tmp_path / SUPERVISOR_LOCK}: not a supervisor lock record ({expected}); remove it if no supervisor runs"
            == str(caught.value))
