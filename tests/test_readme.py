"""The README's first plan, the one users copy, is a valid plan."""

from __future__ import annotations

import re

from dd_slurm.plan.io import parse_plan
from tests.conftest import ROOT


def test_the_first_plan_in_the_readme_validates() -> None:
    """The first ```json block of README.md parses as a plan, and it is five lines long."""
    block = re.search(r"```json\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert (5, "first-run") == (len(block.splitlines()), parse_plan(block).name)
