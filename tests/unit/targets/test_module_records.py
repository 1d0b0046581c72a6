"""Records of a user's nn.Module: its recipe (class, constructor arguments,
state, modes) replays in a fresh process and writes a standalone script.

A module instance has no ``module:qualname``; a record stores how to build it
again (fuzzdiff.targets.recipe), verified at check time, or says why it cannot.
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import fuzzdiff
from fuzzdiff.case.case import Arg, Case
from fuzzdiff.cli import main
from fuzzdiff.record.files import merge, read_record, write_record
from fuzzdiff.record.format import CorpusError
from fuzzdiff.corpus.repro import load, planned_imports, replay
from fuzzdiff.targets.recipe import NoRecipe, build, recipe, references
from fuzzdiff.targets.user import module_definition, user_target
from fuzzdiff.targets.user_import import import_object
from fuzzdiff.case.values import Values
from fuzzdiff.verdict import Verdict

REPO = Path(fuzzdiff.__file__).resolve().parents[1]

MODULES = '''
import torch
import torch.nn.functional as F


class Cube(torch.autograd.Function):
    """x**3 whose backward says 2 x**2 (the planted bug)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x * x


class CubeLayer(torch.nn.Module):
    def forward(self, x):
        return Cube.apply(x)


class Net(torch.nn.Module):
    def __init__(self, features, hidden=4, scale=1.0, act=F.tanh):
        super().__init__()
        self.features, self.hidden, self.scale, self.act = features, hidden, scale, act
        self.lin = torch.nn.Linear(features, hidden)
        self.norm = torch.nn.BatchNorm1d(hidden)

    def forward(self, x):
        return self.act(Cube.apply(self.norm(self.lin(x)))) * self.scale


class Cell(torch.nn.Module):
    """Two inputs that share the batch dim, as a recurrent cell's x and hx."""

    def forward(self, x, hx):
        return Cube.apply(x) + hx


class Lost(torch.nn.Module):
    """Its constructor argument is not kept: no recipe."""

    def __init__(self, n):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)

    def forward(self, x):
        return Cube.apply(self.lin(x))
'''


@pytest.fixture
def mods(importable):
    return importable("fd_user_modules", MODULES)


def _failing_record(module, spec, tmp_path, **options):
    report = fuzzdiff.check(module, spec, checks=["grad"], dtypes=[torch.float64], max_examples=30, seed=0,
                            corpus=tmp_path / "corpus", **options)
    failure, = report.failures
    return failure.record_path


def _repro(path, *extra, cwd):
    return subprocess.run([sys.executable, "-m", "fuzzdiff", "repro", str(path), *extra],
                          capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(cwd)])})


def test_a_module_record_replays_in_a_fresh_process_and_its_script_shows_the_failure(mods, tmp_path):
    net = mods.Net(3, hidden=2, scale=0.5).double()
    with torch.no_grad():
        net.norm.running_mean.fill_(0.25)  # state the constructor does not make: stored, not rebuilt
    net.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a module with a recipe: no warning
        path = _failing_record(net, "x: b 3", tmp_path)
    module = read_record(path).definition["module"]
    assert module["class"] == "fd_user_modules:Net" and module["inputs"] == "x: b 3"
    assert module["kwargs"] == {"features": 3, "hidden": 2, "scale": 0.5, "act": {"object": "torch.nn.functional:tanh"}}
    assert module["training"] == {"": False, "lin": False, "norm": False}
    assert torch.equal(module["state"]["norm.running_mean"], torch.full((2,), 0.25, dtype=torch.float64))
    done = _repro(path, cwd=tmp_path)
    assert done.returncode == 1 and "reproduced" in done.stdout, done.stdout + done.stderr
    assert "importing fd_user_modules" in done.stderr
    script = _repro(path, "--script", cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    assert "class Net(torch.nn.Module):" in script.stdout  # copied: the script needs torch only
    (tmp_path / "repro_net.py").write_text(script.stdout)
    ran = subprocess.run([sys.executable, "-I", str(tmp_path / "repro_net.py")], capture_output=True, text=True,
                         cwd=tmp_path.parent, timeout=120)
    assert ran.returncode == 1 and ran.stdout.splitlines()[-1].startswith("MISMATCH: "), ran.stdout + ran.stderr


def test_a_container_of_torch_and_user_modules_replays_importing_only_the_users(mods, tmp_path, capsys):
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), mods.CubeLayer(), torch.nn.Tanh())
    path = _failing_record(model, "x: b 3", tmp_path)
    record = read_record(path)
    assert [p.module for p in planned_imports(record)] == ["fd_user_modules"]  # torch's own need no permission
    assert replay(record).failed
    assert main(["corpus", "show", str(path), "--corpus", str(tmp_path / "corpus")]) == 0
    shown = capsys.readouterr().out  # what replaying it would build and import, read without importing
    assert '"class": "torch.nn.modules.container:Sequential"' in shown
    assert "imports:    fd_user_modules:CubeLayer" in shown


def test_a_module_whose_spec_bounds_a_shared_dim_once_replays(mods, tmp_path):
    """The bound written at one use of ``b`` holds at every use (``hx: b>=1 2``
    as rebuilt); the record keeps the spec as written, and the two are one spec."""
    path = _failing_record(mods.Cell(), "x: b>=1 2, hx: b 2", tmp_path)
    assert read_record(path).definition["spec"] == "x: b>=1 2, hx: b 2"
    assert replay(read_record(path)).failed


def test_a_module_without_a_recipe_says_so_at_check_time_and_at_replay(mods, tmp_path):
    with pytest.warns(UserWarning, match=r"will not replay.*'n' of Lost is not kept as an attribute"):
        path = _failing_record(mods.Lost(3), "x: b 3", tmp_path)
    with pytest.raises(CorpusError, match=r"field 'definition': records of module 'Lost' will not replay.*not kept"):
        load(path)

    class Local(torch.nn.Module):
        def forward(self, x):
            return mods.Cube.apply(x)

    with pytest.warns(UserWarning, match="defined inside a function: define it at module level"):
        fuzzdiff.check(Local(), "x: n", checks=["grad"], max_examples=1)


ELSEWHERE = '''
import torch
from fd_user_modules import Cube


class Outside(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n
        self.lin = torch.nn.Linear(n, n)

    def forward(self, x):
        return Cube.apply(self.lin(x))
'''


def test_a_module_from_outside_the_project_replays_only_when_allowed(mods, tmp_path, tmp_path_factory, monkeypatch):
    """As a third-party package's (outside the working directory): imported only with --allow-import."""
    elsewhere = tmp_path_factory.mktemp("site")
    (elsewhere / "fd_outside_pkg.py").write_text(ELSEWHERE)
    monkeypatch.syspath_prepend(str(elsewhere))
    sys.modules.pop("fd_outside_pkg", None)
    import fd_outside_pkg

    try:
        path = _failing_record(fd_outside_pkg.Outside(2), "x: b 2", tmp_path)
    finally:
        sys.modules.pop("fd_outside_pkg", None)
    env_path = os.pathsep.join([str(REPO), str(tmp_path), str(elsewhere)])
    run = [sys.executable, "-m", "fuzzdiff", "repro", str(path)]
    env = {**os.environ, "PYTHONPATH": env_path}
    refused = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert refused.returncode == 2 and "--allow-import fd_outside_pkg" in refused.stderr, refused.stderr
    allowed = subprocess.run([*run, "--allow-import", "fd_outside_pkg"], capture_output=True, text=True,
                             cwd=tmp_path, env=env)
    assert allowed.returncode == 1 and "reproduced" in allowed.stdout, allowed.stdout + allowed.stderr


def test_a_large_state_goes_to_a_data_file_beside_the_record_and_merges_with_it(mods, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(70, 70, bias=False), mods.CubeLayer())  # 4,900 weights
    model[0].weight.requires_grad_(False)  # frozen: not an argument of the checks, still state
    path = _failing_record(model, "x: b 70", tmp_path, sizes=(1, 1))
    stored = json.loads(path.read_text())["definition"]["module"]["state"]["0.weight"]
    assert stored["file"].endswith(".safetensors") and (path.parent / stored["file"]).exists()
    record = read_record(path)
    assert torch.equal(record.definition["module"]["state"]["0.weight"], model[0].weight.detach())
    assert record.definition["module"]["frozen"] == ["0.weight"]
    result = merge([tmp_path / "corpus"], tmp_path / "merged")
    assert len(result.added) == 1 and replay(read_record(result.added[0])).failed


# -- the recipe itself ---------------------------------------------------------------------


class MLP(torch.nn.Sequential):
    """A container subclass with a constructor of its own: built by it, not from its children."""

    def __init__(self, sizes):
        self.sizes = sizes
        super().__init__(*[torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])])


@pytest.mark.parametrize("make", [
    lambda: MLP((2, 3, 1)),
    lambda: torch.nn.LSTM(3, 4, num_layers=2, batch_first=True, proj_size=2),
    lambda: torch.nn.Conv2d(3, 4, (3, 2), padding=1, bias=False),
    lambda: torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.GroupNorm(1, 3)).double(),
    lambda: torch.nn.ModuleDict({"b": torch.nn.PReLU(2), "a": torch.nn.Embedding(5, 2)}),
], ids=["sequential-subclass", "lstm", "conv2d", "sequential-float64", "moduledict"])
def test_a_recipe_builds_the_same_module(make):
    original = make()
    built = build(recipe(original, import_object), import_object)
    assert type(built) is type(original)
    ours, theirs = dict(original.named_parameters()), dict(built.named_parameters())
    assert list(ours) == list(theirs)
    for name, t in [*original.named_parameters(), *original.named_buffers()]:
        other = built.get_parameter(name) if name in theirs else built.get_buffer(name)
        assert other.dtype == t.dtype and torch.equal(other, t), name


def test_a_recipe_refuses_what_would_not_build_the_same_module(mods):
    class Twice(torch.nn.Module):
        pass

    net = mods.Net(3)
    net.scale = 2.0  # kept as it is now: the record builds it so
    assert recipe(net, import_object)["kwargs"]["scale"] == 2.0
    net.hidden = 7  # but not what the constructor made of the old value
    with pytest.raises(NoRecipe, match=r"not this one.*lin.weight has shape \(7, 3\)"):
        recipe(net, import_object)
    with pytest.raises(NoRecipe, match="defined inside a function"):
        recipe(torch.nn.Sequential(Twice()), import_object)


def test_a_recipe_calls_nothing_but_module_classes_and_asks_before_importing_a_type(tmp_path):
    data = {"class": "torch.serialization:load", "args": ["/etc/passwd"], "kwargs": {}, "state": {}}
    with pytest.raises(ValueError, match="is not an nn.Module class"):
        build(data, import_object)
    sneaky = {"class": "torch.nn:Linear", "args": [{"type": "torch.utils.data:Dataset", "str": "x"}, 2],
              "kwargs": {}, "state": {}, "inputs": "x: n 2"}
    assert references(sneaky) == ["torch.utils.data:Dataset"]  # a type built from a string: always asked
    case = Case("M", (Arg((1, 2), Values(seed=1)), Arg((2, 2), Values(seed=2)), Arg((2,), Values(seed=3))), "float64")
    definition = {"fn": "M", "spec": "x: n 2, p_weight: 2 2, p_bias: 2", "module": sneaky}
    path, _ = write_record(tmp_path, "grad", case, Verdict("fail", "planted"), definition=definition)
    with pytest.raises(CorpusError, match="--allow-import torch.utils.data"):
        load(path)
    with pytest.raises(CorpusError, match=r"field 'definition': building torch.utils.data:Dataset from 'x' raised"):
        load(path, allow_import=["torch.utils.data"])


def test_a_per_sample_record_of_a_module_replays_on_one_samples_shapes(mods, tmp_path):
    """fuzzdiff.check runs per_sample on the module itself, at one sample's shapes: so does replay."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), mods.CubeLayer())
    definition = module_definition(user_target(model, "x: b 3"), model)
    case = Case("Sequential", (Arg((3,), Values(seed=1)),), "float64",
                params={"batch": 2, "loss_reduction": "sum", "input_grad": True, "infer_batch": False,
                        "layouts": [None], "cotangent": {"seed": 5, "layout": "contiguous", "zeros": 0.0}})
    path, _ = write_record(tmp_path, "per_sample", case, Verdict("fail", "planted"), definition=definition)
    _, target = load(path)
    assert target.spec == "x: 3" and target.module is not None
    assert replay(path).kind == "pass"  # the planted verdict: ExpandedWeights and the loop agree here
