"""fuzzdiff.commands.options: the checks every command's arguments share, and their words."""

import argparse
import math

import pytest
import torch

from fuzzdiff.commands.options import (
    UsageError,
    allowed_imports,
    at_least_one,
    corpus_root,
    device_option,
    dtypes_option,
    positive,
    record_path,
    resolve_config,
    split,
)
from fuzzdiff.record.format import CorpusError


def test_lists_split_on_commas_and_spaces_alike():
    assert split(["grad,vmap", "layout", ","]) == ["grad", "vmap", "layout"]
    assert split(None) is None and split([]) is None


@pytest.mark.parametrize("value", [0, -3])
def test_a_count_below_one_names_its_option(value):
    with pytest.raises(UsageError, match="^--jobs must be at least 1$"):
        at_least_one(value, "--jobs")


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan])
def test_seconds_must_be_positive_and_nan_is_not(value):
    with pytest.raises(UsageError, match=r"^--budget must be positive \(inf: no limit\)$"):
        positive(value, "--budget", " (inf: no limit)")


def test_what_is_not_given_or_in_range_passes():
    at_least_one(None, "--rounds")
    at_least_one(1, "--rounds")
    positive(None, "--budget")
    positive(math.inf, "--budget")
    positive(0.5, "--batch-seconds")


def test_dtypes_are_floating_or_complex_and_a_bad_one_lists_the_choices():
    assert dtypes_option(["float32,complex64"]) == [torch.float32, torch.complex64]
    assert dtypes_option(None) is None
    with pytest.raises(UsageError, match="non-floating dtype.s. int64, nope; expected some of .*float64") as bad:
        dtypes_option(["int64", "nope", "float32"])
    assert "int64, nope;" in str(bad.value) and "int32" not in str(bad.value)


def test_a_device_is_cpu_or_cuda_and_cuda_needs_a_gpu(monkeypatch):
    assert device_option(None) is None and device_option("cpu") == "cpu"
    with pytest.raises(UsageError, match="expected cpu or cuda"):
        device_option("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError, match="no CUDA device is available"):
        device_option("cuda:0")
    assert device_option("cuda:0", cluster=True) == "cuda:0"  # the cluster's GPUs: fuzzdiff.campaign.cluster checks


def test_allow_import_takes_module_names_only():
    assert allowed_imports(argparse.Namespace(allow_import=None)) == []
    assert allowed_imports(argparse.Namespace(allow_import=["pkg", "pkg.ops"])) == ["pkg", "pkg.ops"]
    with pytest.raises(UsageError, match="--allow-import 'pkg/ops': expected a module name"):
        allowed_imports(argparse.Namespace(allow_import=["pkg", "pkg/ops"]))


def test_the_corpus_is_the_flag_else_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FUZZDIFF_CORPUS", str(tmp_path / "from_env"))
    assert corpus_root(argparse.Namespace(corpus=str(tmp_path / "given"))) == tmp_path / "given"
    assert corpus_root(argparse.Namespace(corpus=None)) == tmp_path / "from_env"
    monkeypatch.setenv("FUZZDIFF_TIMEOUT", "soon")  # read only without --corpus, and then a usage error
    assert corpus_root(argparse.Namespace(corpus=str(tmp_path))) == tmp_path
    with pytest.raises(UsageError, match="FUZZDIFF_TIMEOUT"):
        resolve_config()


def test_a_record_is_found_in_the_commands_corpus(tmp_path):
    (tmp_path / "grad" / "t").mkdir(parents=True)
    (tmp_path / "grad" / "t" / "abc123.json").write_text("{}")
    args = argparse.Namespace(corpus=str(tmp_path))
    assert record_path(args, "abc") == tmp_path / "grad" / "t" / "abc123.json"
    with pytest.raises(CorpusError, match="no record with id 'zzz'"):
        record_path(args, "zzz")
