"""fuzzdiff.search.fuzzing: what ``settle_heap`` does to the process it is asked in."""

import ast
import subprocess
import sys

SETTLE = """
import gc
before = gc.get_threshold()
from fuzzdiff.search.fuzzing import settle_heap
settle_heap()
frozen, after = gc.get_freeze_count(), gc.get_threshold()
settle_heap()  # once per process: a second call changes nothing
print(repr((before, after, frozen > 0, gc.get_threshold() == after, gc.get_freeze_count() == frozen)))
"""


def test_settle_heap_freezes_once_and_makes_full_collections_rarer_in_its_own_process():
    out = subprocess.run([sys.executable, "-c", SETTLE], capture_output=True, text=True, check=True).stdout
    before, after, frozen, same_threshold, same_freeze = ast.literal_eval(out)
    assert frozen and same_threshold and same_freeze
    assert after[:2] == before[:2], "the young generations keep their pace"
    assert after[2] >= max(before[2], 100), f"full collections not made rarer: {before} -> {after}"
