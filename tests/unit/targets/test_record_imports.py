"""What a corpus record may make fuzzdiff import.

A record of a user target names a module to import (``module:qualname``).
Records travel (``fuzzdiff corpus merge``, a pull request), so reading,
listing, showing and merging them is JSON only, and rebuilding the target
imports only the project's own modules (files under the working directory,
outside installed packages) or those named with ``--allow-import`` /
``allow_import=``. Each module here writes a marker file when it is imported.
"""

import os
import sys
from pathlib import Path

import pytest

import fuzzdiff
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.cli import main
from fuzzdiff.record.files import merge, read_record, write_record
from fuzzdiff.case.layout import Layout
from fuzzdiff.record.format import CorpusError
from fuzzdiff.corpus.repro import imports, load, replay
from fuzzdiff.targets.user_import import ImportRefused, plan_import
from fuzzdiff.case.values import Values
from fuzzdiff.verdict import Verdict

REPO = Path(fuzzdiff.__file__).resolve().parents[1]

SIDE_EFFECT = '''
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text(__name__)

from fuzzdiff.targets.target import Target


def fn(x):
    return x.sin()


TARGET = Target("side_effect", fn, "x: n", origin="fd_side_effect:TARGET")
'''

PACKAGE_INIT = '''
import pathlib
pathlib.Path(__file__).with_name("IMPORTED").write_text(__name__)
'''


@pytest.fixture
def places(tmp_path, monkeypatch):
    """``project`` (the working directory) and ``elsewhere`` (on sys.path, as an
    installed or a merged-in module would be), each with a module that marks
    its import, and a package ``fd_side_pkg`` whose __init__ marks it too."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    for folder in (project, elsewhere):
        folder.mkdir()
        (folder / "fd_side_pkg").mkdir()
        (folder / "fd_side_pkg" / "__init__.py").write_text(PACKAGE_INIT)
        (folder / "fd_side_pkg" / "ops.py").write_text(SIDE_EFFECT)
    (elsewhere / "fd_side_effect.py").write_text(SIDE_EFFECT)
    (project / "fd_own_module.py").write_text(SIDE_EFFECT)
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(elsewhere))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(elsewhere)]))  # child replays
    yield project, elsewhere
    for name in ("fd_side_effect", "fd_own_module", "fd_side_pkg", "fd_side_pkg.ops", "fd_own_pkg"):
        sys.modules.pop(name, None)


def _record(root: Path, target: str, kind: str = "fail", definition: dict | None = None) -> Path:
    case = Case(target, (Arg((3,), Values(seed=1), Layout(3, (1,), 0)),), "float64")
    path, _ = write_record(root, "grad", case, Verdict(kind, "planted"), definition=definition)
    return path


def _imported(folder: Path) -> bool:
    return (folder / "IMPORTED").exists()


def test_reading_listing_and_showing_records_imports_nothing(places, tmp_path, capsys):
    _, elsewhere = places
    corpus = tmp_path / "corpus"
    named = _record(corpus, "fd_side_effect:TARGET")
    defined = _record(corpus, "fd_side_effect:fn", definition={"fn": "fd_side_effect:fn", "spec": "x: n"})
    assert read_record(named).target == "fd_side_effect:TARGET"
    assert read_record(defined).definition["fn"] == "fd_side_effect:fn"
    for argv in (["corpus", "list"], ["corpus", "stats"], ["corpus", "show", named.stem]):
        assert main([*argv, "--corpus", str(corpus)]) == 0
    assert main(["corpus", "promote", named.stem, "--corpus", str(corpus), "--to", str(tmp_path / "tests")]) == 0
    assert not _imported(elsewhere) and "fd_side_effect" not in sys.modules


def test_merging_a_record_never_imports_the_module_it_names(places, tmp_path, capsys):
    _, elsewhere = places
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    _record(theirs, "fd_side_effect:TARGET")
    _record(theirs, "fd_side_pkg.ops:fn", definition={"fn": "fd_side_pkg.ops:fn", "spec": "x: n"})
    assert len(merge([theirs], ours).added) == 2
    assert main(["corpus", "merge", str(theirs), "--corpus", str(tmp_path / "ours2")]) == 0
    assert "2 new records" in capsys.readouterr().out
    assert not _imported(elsewhere) and not _imported(elsewhere / "fd_side_pkg")
    assert not {"fd_side_effect", "fd_side_pkg"} & set(sys.modules)


@pytest.mark.parametrize("definition", [False, True], ids=["target-name", "definition"])
def test_loading_a_record_of_a_module_outside_the_project_is_refused_before_importing(
        places, tmp_path, definition):
    _, elsewhere = places
    path = _record(tmp_path / "corpus", "fd_side_effect:TARGET" if not definition else "fd_side_effect:fn",
                   definition={"fn": "fd_side_effect:fn", "spec": "x: n"} if definition else None)
    for attempt in (lambda: load(path), lambda: replay(path), lambda: imports(path)):
        with pytest.raises(CorpusError) as refused:
            attempt()
        message = str(refused.value)
        assert str(path) in message and "--allow-import fd_side_effect" in message
        assert str(elsewhere / "fd_side_effect.py") in message  # where it would have come from
    assert not _imported(elsewhere) and "fd_side_effect" not in sys.modules
    assert not replay(path, allow_import=["fd_side_effect"]).failed  # sin's gradient is right
    assert _imported(elsewhere)


def test_a_dotted_module_is_located_without_running_its_packages(places):
    project, elsewhere = places
    (project / "fd_side_pkg").rename(project / "fd_own_pkg")
    planned = plan_import("fd_own_pkg.ops:fn")
    assert planned.origin == str(project / "fd_own_pkg" / "ops.py") and "in the project" in planned.reason
    assert str(planned) == (f"importing fd_own_pkg.ops (from {project / 'fd_own_pkg' / 'ops.py'}) "
                            "to rebuild target fd_own_pkg.ops:fn")
    with pytest.raises(ImportRefused, match="--allow-import fd_side_pkg.ops") as refused:
        plan_import("fd_side_pkg.ops:fn")
    assert f"{elsewhere / 'fd_side_pkg' / '__init__.py'} is not the project's code" in str(refused.value)
    allowed = plan_import("fd_side_pkg.ops:fn", allow=["fd_side_pkg"])
    assert allowed.origin == str(elsewhere / "fd_side_pkg" / "ops.py")
    assert not _imported(project / "fd_own_pkg") and not _imported(elsewhere / "fd_side_pkg")
    assert not {"fd_own_pkg", "fd_side_pkg"} & set(sys.modules)
    (project / "fd_ns" / "inner").mkdir(parents=True)  # namespace packages: no __init__ anywhere
    (project / "fd_ns" / "inner" / "mod.py").write_text("")
    assert plan_import("fd_ns.inner.mod:fn").origin == str(project / "fd_ns" / "inner" / "mod.py")
    assert "fd_ns" not in sys.modules


def test_allowing_a_module_allows_its_submodules_only(places):
    assert plan_import("fd_side_effect:fn", allow=["fd_side_effect"]).reason.startswith("allowed")
    for allow in (["fd_side"], ["fd_side_effect.sub"], ["other"]):
        with pytest.raises(ImportRefused):
            plan_import("fd_side_effect:fn", allow=allow)


def test_installed_packages_inside_the_project_are_not_the_project():
    """A virtual environment (or the standard library) under the working
    directory is not the project's code: with / as the project, neither is."""
    for ref in ("json:dumps", "json.decoder:JSONDecoder", "torch.nn.functional:relu"):
        with pytest.raises(ImportRefused, match="is not the project's code"):
            plan_import(ref, root="/")
    with pytest.raises(ImportRefused):
        plan_import("sys:path", root="/")  # built in: no file at all
    for ref, missing in (("no_such_module_anywhere:fn", "no_such_module_anywhere"),
                         ("json.no_such_module:fn", "json.no_such_module"),
                         ("json.decoder.not_a_package:fn", "json.decoder.not_a_package")):
        with pytest.raises(ValueError, match=f"no module named '{missing}'") as error:
            plan_import(ref)
        assert not isinstance(error.value, ImportRefused)


def test_catalog_and_opinfo_records_import_no_user_code(tmp_path):
    assert imports(_record(tmp_path, "sin")) is None
    assert imports(_record(tmp_path, "opinfo/sin@0")) is None


def test_repro_states_the_import_and_imports_the_projects_module(places, tmp_path, capsys):
    project, _ = places
    path = _record(tmp_path / "corpus", "fd_own_module:TARGET")
    assert main(["repro", str(path)]) == 0  # replays as a pass: "did not reproduce"
    err = capsys.readouterr().err
    assert (f"importing fd_own_module (from {project / 'fd_own_module.py'}) "
            "to rebuild target fd_own_module:TARGET") in err
    assert _imported(project)


def test_repro_refuses_a_module_outside_the_project_and_runs_it_when_allowed(places, tmp_path, capsys):
    _, elsewhere = places
    path = _record(tmp_path / "corpus", "fd_side_effect:TARGET")
    assert main(["repro", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--allow-import fd_side_effect" in err and "Traceback" not in err
    assert main(["repro", str(path), "--script"]) == 2
    assert not _imported(elsewhere) and "fd_side_effect" not in sys.modules
    assert main(["repro", str(path), "--allow-import", "bad name"]) == 2
    assert "expected a module name" in capsys.readouterr().err

    assert main(["repro", str(path), "--allow-import", "fd_side_effect"]) == 0
    out, err = capsys.readouterr()
    assert f"importing fd_side_effect (from {elsewhere / 'fd_side_effect.py'})" in err
    assert "replayed: pass" in out and _imported(elsewhere)


def test_a_crash_record_is_refused_too_and_replays_in_a_child_when_allowed(places, tmp_path, capsys):
    """The child process that replays a crash record is held to the same list."""
    _, elsewhere = places
    path = _record(tmp_path / "corpus", "fd_side_effect:TARGET", kind="crash")
    assert main(["repro", str(path)]) == 2
    assert not _imported(elsewhere)
    verdict = replay(path, allow_import="fd_side_effect")
    assert verdict.kind == "pass" and "child process" in verdict.message
