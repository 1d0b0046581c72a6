"""Reading a case back from JSON: a malformed JSON record is a CaseError that names the offending field."""

from __future__ import annotations

import copy
import json

import pytest

from fuzzdiff.case.case import Arg, Case
from fuzzdiff.case.layout import Alias, CaseError, Layout
from fuzzdiff.record.format import case_from_json, decode_floats
from fuzzdiff.case.values import Values


def good_record() -> dict:
    case = Case("unit", (
        Arg((2, 3), Values(seed=5, specials=((1, "inf"),)), Layout(8, (1, 2), 1)),
        Arg((2, 3), Values(seed=6), alias=Alias(0, "view"), layout=Layout(8, (3, 1), 0), grad="view"),
        Arg((2,), Values(kind="int", low=0, high=2), grad="none", dtype="int64"),
    ), dtype="float32", params={"cotangent": {"seed": 1, "layout": "expanded", "zeros": 0.5}})
    return json.loads(json.dumps(case.to_json(), allow_nan=False))


def test_good_record_loads():
    case = case_from_json(good_record())
    assert case.args[0].layout == Layout(8, (1, 2), 1)
    assert case.args[0].values.specials == ((1, "inf"),)
    assert case.args[1].alias == Alias(0, "view")
    assert case.dtype == "float32"


def _set(record: dict, path: list, value):
    obj = record
    for key in path[:-1]:
        obj = obj[key]
    if value is _DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


_DELETE = object()
A0 = ["args", 0]


@pytest.mark.parametrize("path,value,field", [
    (A0 + ["layout", "strides"], "1,2", "case.args[0].layout.strides"),
    (A0 + ["layout", "strides"], [1, 2.0], "case.args[0].layout.strides"),
    (A0 + ["layout", "strides"], [1, True], "case.args[0].layout.strides"),
    (A0 + ["layout", "strides"], [1], "case.args[0].layout"),
    (A0 + ["layout", "strides"], [1, -2], "case.args[0].layout"),
    (A0 + ["layout", "storage_size"], 3, "case.args[0].layout"),
    (A0 + ["layout", "storage_size"], _DELETE, "case.args[0].layout.storage_size"),
    (A0 + ["layout", "offset"], "1", "case.args[0].layout.offset"),
    (A0 + ["layout"], [8, [1, 2]], "case.args[0].layout"),
    (A0 + ["shape"], _DELETE, "case.args[0].shape"),
    (A0 + ["shape"], [2, -3], "case.args[0].shape"),
    (A0 + ["shape"], [2, "3"], "case.args[0].shape"),
    (A0 + ["shape"], 6, "case.args[0].shape"),
    (A0 + ["values", "seed"], "5", "case.args[0].values.seed"),
    (A0 + ["values", "seed"], True, "case.args[0].values.seed"),
    (A0 + ["values", "low"], 3.0, "case.args[0].values"),
    (A0 + ["values", "high"], {"float": "inf"}, "case.args[0].values"),
    (A0 + ["values", "specials"], [[1, "infinity"]], "case.args[0].values.specials[0]"),
    (A0 + ["values", "specials"], [[1, "nan"], [2]], "case.args[0].values.specials[1]"),
    (A0 + ["values", "kind"], "complex", "case.args[0].values.kind"),
    (A0 + ["values", "distinct"], 1, "case.args[0].values.distinct"),
    (A0 + ["values"], [], "case.args[0].values"),
    (A0 + ["values", "avoid"], ["x"], "case.args[0].values.avoid"),
    (A0 + ["values", "avoid"], [[0.0]], "case.args[0].values.avoid"),
    (A0 + ["values", "avoid"], [None], "case.args[0].values.avoid"),
    (A0 + ["values", "avoid"], 0.0, "case.args[0].values.avoid"),
    (A0 + ["values", "margin"], "0.1", "case.args[0].values.margin"),
    (A0 + ["values", "grid"], "0.25", "case.args[0].values.grid"),
    (A0 + ["grad"], "both", "case.args[0].grad"),
    (A0 + ["dtype"], "float128", "case.args[0].dtype"),
    (["args", 1, "alias", "kind"], "copy", "case.args[1].alias.kind"),
    (["args", 1, "alias", "of"], 1, "case.args[1].alias.of"),
    (["args", 1, "alias", "of"], 2, "case.args[1].alias.of"),
    (["args", 1, "alias", "of"], -1, "case.args[1].alias.of"),
    (["args", 1, "alias"], "arg0", "case.args[1].alias"),
    (["args", 2], "x", "case.args[2]"),
    (["args"], {"0": {}}, "case.args"),
    (["args"], _DELETE, "case.args"),
    (["target"], _DELETE, "case.target"),
    (["target"], 7, "case.target"),
    (["dtype"], "float8", "case.dtype"),
    (["device"], 0, "case.device"),
    (["kwargs"], [], "case.kwargs"),
    (["params"], "cotangent", "case.params"),
])
def test_malformed_record_names_the_field(path, value, field):
    record = copy.deepcopy(good_record())
    _set(record, path, value)
    with pytest.raises(CaseError) as info:
        case_from_json(record)
    message = str(info.value)
    assert message.startswith(field), (field, message)
    # the field is named exactly, not a prefix of a longer one: "args[1]" is not "args[10]"
    rest = message[len(field):]
    assert rest[:1] in (":", ".", "["), message


def test_top_level_must_be_an_object():
    with pytest.raises(CaseError, match=r"^case: expected an object"):
        case_from_json([1, 2])


def test_case_error_is_a_value_error():
    assert issubclass(CaseError, ValueError)


def test_decode_floats_only_decodes_the_exact_encoding():
    assert decode_floats({"float": "inf"}) == float("inf")
    assert decode_floats({"float": float.hex(-0.0)}) == 0.0
    assert str(decode_floats({"float": float.hex(-0.0)})) == "-0.0"
    assert decode_floats({"float": 1}) == {"float": 1}
    assert decode_floats({"float": "inf", "x": 1}) == {"float": "inf", "x": 1}
