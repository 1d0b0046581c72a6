"""The ``fuzzdiff`` command's handlers (``cmd_*``), one module per group of
subcommands, apart from fuzzdiff.cli so that parsing arguments imports no
torch: ``--help`` and usage errors answer at once. fuzzdiff.cli finds each
handler here by the name its parser gives it; the arguments they share are
checked in fuzzdiff.commands.options."""

from fuzzdiff.commands.check import cmd_check
from fuzzdiff.commands.corpus import (
    cmd_corpus_list,
    cmd_corpus_merge,
    cmd_corpus_promote,
    cmd_corpus_replay,
    cmd_corpus_show,
    cmd_corpus_stats,
)
from fuzzdiff.commands.listing import cmd_list
from fuzzdiff.commands.records import cmd_report, cmd_repro
from fuzzdiff.commands.run import cmd_run

__all__ = [
    "cmd_check",
    "cmd_corpus_list",
    "cmd_corpus_merge",
    "cmd_corpus_promote",
    "cmd_corpus_replay",
    "cmd_corpus_show",
    "cmd_corpus_stats",
    "cmd_list",
    "cmd_report",
    "cmd_repro",
    "cmd_run",
]
