"""Corpus records' standalone scripts (fuzzdiff.script) reproduce them.

A sample of open records, one per check, whose scripts must fail as
recorded on this torch; each also written as if its case ran on CUDA, with
the script's DEVICE set back to "cpu", which runs its device handling here
and must fail the same way. The CUDA records' scripts exit with status 2
where CUDA is absent, and pass on the CPU (their bugs are CUDA's). The vmap
transform's compile records fail before their ``fixed_in`` and pass from it
on. A compile script passes the keyword arguments (a program's numbers among
them) through a closure, as the check does, and reports a compiled backward
that raises as the check does, as a mismatch; a script whose forward raised
where it was written runs it first, to raise its own error. ``bench/record_scripts.py`` runs
every record's script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from fuzzdiff.corpus import repro
from fuzzdiff.config import default_corpus
from fuzzdiff.record.files import iter_records
from fuzzdiff.targets.releases import fixed_by
from fuzzdiff.script import ScriptError, standalone_script
from tests.unit.script.test_script import run_programs

RECORDS = [repro.read(p) for p in iter_records(default_corpus(os.environ))]
CUDA_RECORDS = ("0c33744c03107c7e", "5c00d33331c237e0")  # vmap's nested vmap; layout's misaligned address
VMAP_TRANSFORM = ("9c7ab91229f4fc98", "81c226c14fc476c3")  # compile of vmap: addbmm@0, baddbmm@0
# What each script must do to reach the failure its check reached, by record: compile of
# vmap, addcdiv's value= a SymFloat; compile of a program, its slice start a SymInt (both
# held in a closure); gradgrad of tensorly's kronecker, whose forward raised where the
# script was written (so it runs first); compile's dual transform of a sample whose eager
# side raised there (its results named by number); a compiled backward that refuses a saved
# input written in place (a mismatch, as the check has it)
REACHES = {
    "1b22a5e38ab20261": "call = call_with({'value': ",
    "25c92fb2a59fac38": "call = call_with({'start_2': 1, ",
    "5fd69a3f11cd0c51": "    if V is None:  # the function raised RuntimeError at these inputs",
    "eff2a30ed78886e4": "LABELS = None  # the eager side raised RuntimeError",
    "aa6f50987f2792c4": 'backward_error = "raises: "',
}
NO_DEVICE = {"per_sample", "backend"}  # a module built on the CPU; numpy on the host


def by_id(record_id: str):
    return next(r for r in RECORDS if r.id == record_id)


def script(record, case=None, verdict=True) -> str:
    record, target = repro.load(record)
    return standalone_script(
        record.check,
        record.case if case is None else case,
        record.verdict if verdict else None,
        target=target,
        found_with=record.found_with,
    )


def on_cpu(source: str) -> str:
    """A device script with its DEVICE set to the CPU."""
    assert source.count('\nDEVICE = "cuda"') == 1, source[:2000]
    return source.replace('\nDEVICE = "cuda"', '\nDEVICE = "cpu"')


def sample() -> list:
    """One open CPU record per check, the smallest (the quickest script)."""
    chosen: dict = {}
    for r in RECORDS:
        if r.status == "open" and r.case.device == "cpu" and r.verdict.kind != "crash":
            size = r.path.stat().st_size
            if r.check not in chosen or size < chosen[r.check][0]:
                chosen[r.check] = (size, r)
    return [r for _, r in sorted(chosen.values(), key=lambda sr: sr[1].check)]


def assert_fails_as_recorded(record, code, out: str) -> None:
    exception = record.verdict.errors.get("exception")
    if exception is None:
        assert code == 1 and out.strip().splitlines()[-1].startswith("MISMATCH: "), (record.path, out[-3000:])
    else:
        assert code == "raised" and f"raised {exception}:" in out, (record.path, exception, out[-3000:])


def test_a_sample_of_open_records_scripts_reproduce_also_through_the_device_handling(tmp_path):
    records = sample()
    assert len({r.check for r in records}) >= 10
    device = [r for r in records if r.check not in NO_DEVICE]
    sources = [script(r) for r in records]
    sources += [on_cpu(script(r, replace(r.case, device="cuda"))) for r in device]
    results = run_programs(sources, tmp_path)
    for record, (code, out) in zip([*records, *device], results):
        assert_fails_as_recorded(record, code, out)


def test_the_cuda_records_scripts_say_cuda_is_needed_and_pass_on_the_cpu(tmp_path):
    records = [by_id(i) for i in CUDA_RECORDS]
    assert {r.case.device for r in records} == {"cuda"}
    for r in records:
        source = script(r)  # written with no CUDA at hand
        compile(source, str(r.path), "exec")
        assert 'DEVICE = "cuda"' in source and "exits with status 2" in source
        if r.verdict.kind == "crash":  # the fault raises at its call
            assert "run it as CUDA_LAUNCH_BLOCKING=1 python" in source
        if not torch.cuda.is_available():
            path = tmp_path / f"{r.id}.py"
            path.write_text(source)
            done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
            assert done.returncode == 2, done.stdout + done.stderr
            assert done.stderr.strip() == "needs CUDA; torch.cuda.is_available() is False"
    # the same cases on the CPU, through the scripts' device handling: each runs to its verdict
    # (a crash record's own script leaves its cotangents to the call that crashes)
    results = run_programs([on_cpu(script(r, verdict=False)) for r in records], tmp_path)
    for r, (code, out) in zip(records, results):
        assert code in (0, 1) and out.splitlines()[-1].startswith(("OK: ", "MISMATCH: ")), (r.path, out[-3000:])


@pytest.mark.parametrize(
    "record_id",
    [
        CUDA_RECORDS[0],
        CUDA_RECORDS[1],  # the layout check's other run holds the record's values (Case.with_layouts)
    ],
)
def test_the_cuda_records_pass_on_the_cpu_their_bugs_are_cudas(record_id, tmp_path):
    record = by_id(record_id)
    [(code, out)] = run_programs([on_cpu(script(record, verdict=False))], tmp_path)
    assert code == 0 and out.splitlines()[-1].startswith("OK: "), (record.path, out[-3000:])


@pytest.mark.parametrize("check", sorted(NO_DEVICE))
def test_a_device_script_that_cannot_be_written_says_why(check):
    record = next(r for r in RECORDS if r.check == check)
    with pytest.raises(ScriptError, match="(module's script builds it on the CPU|numpy backend runs on the host)"):
        script(record, replace(record.case, device="cuda"))


def test_the_vmap_transforms_compile_records_fail_before_their_fix_and_pass_after(tmp_path):
    """The compile check holds the function under test in a closure, where dynamo
    traces an OpInfo sample's alpha=1 as a symbolic int: so does the script."""
    records = [by_id(i) for i in VMAP_TRANSFORM]
    results = run_programs([script(r) for r in records], tmp_path)
    for r, (code, out) in zip(records, results):
        assert r.case.params["transform"] == "vmap"
        if fixed_by(r.fixed_in):
            assert code == 0 and out.splitlines()[-1].startswith("OK: "), (r.path, out[-3000:])
        else:
            assert_fails_as_recorded(r, code, out)


@pytest.mark.parametrize("record_id", sorted(REACHES))
def test_scripts_reach_the_failure_the_check_reached(record_id, tmp_path):
    """dynamo traces a number it reaches through a closure as symbolic and a literal
    as a constant: the compile scripts pass keyword arguments as the check does. A
    script without cotangents (the forward raised where it was written) runs the
    forward first, which raises the function's own error. Each fails as recorded
    before its fix and passes from it on."""
    record = by_id(record_id)
    if record.target.startswith("tl_"):
        pytest.importorskip("tensorly")
    source = script(record)
    assert REACHES[record_id] in source, source[-6000:]
    [(code, out)] = run_programs([source], tmp_path)
    if record.fixed_in and fixed_by(record.fixed_in):
        assert code == 0 and out.splitlines()[-1].startswith("OK: "), (record.path, out[-3000:])
    else:
        assert_fails_as_recorded(record, code, out)
