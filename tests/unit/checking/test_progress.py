"""``fuzzdiff.check``'s progress off a terminal (fuzzdiff.checking.progress): a line per finished check on stderr."""

from __future__ import annotations

import torch

import fuzzdiff


def test_off_a_terminal_each_finished_check_is_a_line_on_stderr(capsys):
    fuzzdiff.check(torch.sin, "x: n", checks=("grad", "forward"), max_examples=3, seed=0)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ")[1] for line in lines] == ["grad", "forward"], lines
    assert all("cases" in line and line.endswith(" s") for line in lines), lines
    fuzzdiff.check(torch.sin, "x: n", checks=("grad",), max_examples=3, seed=0, progress=False)
    assert capsys.readouterr().err == ""
