"""The inputs of a case as script text: storages, leaves and arguments.

Mirrors ``Case.materialize`` step by step (its ``_plan``): each storage is a
1-D tensor written element by element (junk outside the views included), a
leaf is either an argument's own strided view of its storage or the whole
storage (when some argument is a non-leaf view of it), and the arguments are
rebuilt from the leaves as the same tensor, a view, or a fixed input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from fuzzdiff.case.case import Case
from fuzzdiff.case.layout import Layout
from fuzzdiff.script.literals import ON_DEVICE, storage_literal

__all__ = ["InputsCode", "inputs_code"]


@dataclass
class InputsCode:
    storages: str  # module-level storage tensors
    functions: str  # make_leaves / make_args
    leaf_names: list[str]
    arg_names: list[str]
    differentiable: list[bool]  # per argument: derivatives flow to a leaf
    sources: list  # per argument: (leaf index, Layout or None) or None, as Inputs.sources


def _elements(shape, lay: Layout) -> set[int]:
    if math.prod(shape) == 0:
        return set()
    idx = torch.zeros((), dtype=torch.int64)
    for n, s in zip(shape, lay.strides):
        idx = idx.unsqueeze(-1) + torch.arange(n) * s
    return set((idx.reshape(-1) + lay.offset).tolist())


def describe_layout(shape: Sequence[int], lay: Layout) -> str:
    """A few words on how a view sits in its storage, for a comment."""
    if lay.is_contiguous(shape) and lay.storage_size == math.prod(shape):
        return "contiguous"
    words = []
    zero = [d for d, (n, s) in enumerate(zip(shape, lay.strides)) if s == 0 and n > 1]
    if zero:
        words.append(f"stride 0 along dim {', '.join(map(str, zero))} (expanded)")
    if lay.offset:
        words.append(f"storage offset {lay.offset}")
    if not zero:
        probe = (
            torch.empty(0).as_strided(tuple(shape), lay.strides)
            if math.prod(shape) == 0
            else torch.empty(lay.storage_size).as_strided(tuple(shape), lay.strides, lay.offset)
        )
        if probe.is_contiguous(memory_format=torch.channels_last) and len(shape) == 4 and not probe.is_contiguous():
            words.append("channels_last")
        elif not Layout(lay.storage_size, lay.strides, 0).is_contiguous(shape):
            words.append(f"strides {tuple(lay.strides)}")
    if not words:
        words.append(f"contiguous within a storage of {lay.storage_size}")
    return ", ".join(words)


def _view(expr: str, shape, lay: Layout, base_size: int) -> str:
    """``expr`` (a 1-D tensor of ``base_size`` elements) viewed as the argument."""
    # exactly reshape()'s strides: is_contiguous() allows any stride on a size-1 dim
    if lay == Layout.contiguous(shape) and base_size == math.prod(shape):
        return f"{expr}.reshape({tuple(shape)!r})"
    return f"{expr}.as_strided({tuple(shape)!r}, {tuple(lay.strides)!r}, {lay.offset})"


def inputs_code(
    case: Case,
    storages: Mapping[int, torch.Tensor],
    names: Sequence[str],
    suffix: str = "",
    what: str = "",
    on_device: bool = False,
) -> InputsCode:
    """Script text that rebuilds ``case``'s leaves and arguments from ``storages``;
    ``on_device``: each storage moved to the script's ``DEVICE``, where the views of it are taken."""
    keys, steps, sources = case._plan
    args = case.args
    store = {o: f"{names[o]}_storage{suffix}" for o in storages}
    fixed = {o: args[o].dtype is not None for o in storages}

    def size(o: int) -> int:
        return storages[o].numel()

    def fresh(o: int) -> str:  # a private copy of storage o, in the run's dtype
        return f"{store[o]}.clone()" if fixed[o] else f"{store[o]}.to(dtype, copy=True)"

    lines = [
        f"# The memory each argument lives in, element by element{what}: a view may skip elements,",
        "# and a correct op never reads those.",
    ]
    for o, t in sorted(storages.items()):
        lines.append(f"{store[o]} = {storage_literal(t, indent='')}{ON_DEVICE if on_device else ''}")
    storage_text = "\n".join(lines)

    leaf_names, leaf_lines = [], []
    for o, whole in keys:
        a = args[o]
        if whole:
            name = f"{names[o]}_base"
            users = [names[i] for i in range(len(args)) if case.owner(i) == o]
            leaf_lines.append(
                f"    {name} = {fresh(o)}  # the whole storage: "
                f"{', '.join(users)} {'are views' if len(users) > 1 else 'is a view'} of it"
            )
        else:
            name = names[o]
            leaf_lines.append(
                f"    {name} = {_view(fresh(o), a.shape, a.strided, size(o))}  # {describe_layout(a.shape, a.strided)}"
            )
        leaf_names.append(name)
    leaves_fn = [
        f"def make_leaves{suffix}(dtype=DTYPE, requires_grad=True):",
        '    """Fresh copies of the tensors derivatives are taken with respect to."""',
        *leaf_lines,
        f"    return [t.detach().requires_grad_(requires_grad) for t in "
        f"({', '.join(leaf_names)}{',' if len(leaf_names) == 1 else ''})]",
    ]

    arg_lines = []
    const_owners = [o for (kind, o, *_rest) in steps if kind == "const"]
    shared = {o for o in const_owners if const_owners.count(o) > 1}
    for o in sorted(shared):
        arg_lines.append(f"    {names[o]}_memory = {fresh(o)}")
    for i, (kind, k, shape, _strides, _offset) in enumerate(steps):
        a, name = args[i], names[i]
        if kind == "same":
            arg_lines.append(f"    {name} = {names[k]}  # the very same tensor as {names[k]}")
        elif kind == "const":
            src = f"{names[k]}_memory" if k in shared else fresh(k)
            note = "not differentiated" + (f", shares {names[k]}'s storage" if k != i else "")
            arg_lines.append(
                f"    {name} = {_view(src, shape, a.strided, size(k))}  # {note}; {describe_layout(shape, a.strided)}"
            )
        elif kind == "view":
            base = leaf_names[k]
            owner = k_owner = case.owner(i)
            note = describe_layout(shape, a.strided)
            if owner != i:
                overlap = _elements(shape, a.strided) & _elements(args[owner].shape, args[owner].strided)
                note += f"; {'overlaps' if overlap else 'disjoint from'} {names[owner]} in memory"
            arg_lines.append(f"    {name} = {_view(base, shape, a.strided, size(k_owner))}  # a non-leaf view: {note}")
        # "leaf": the argument is the leaf itself, already named
    unpack = f"({leaf_names[0]},)" if len(leaf_names) == 1 else ", ".join(leaf_names)
    args_fn = [
        f"def make_args{suffix}(leaves):",
        '    """The arguments as fuzzed (views, aliases, fixed inputs), built from the leaves."""',
        "    dtype = leaves[0].dtype if leaves else DTYPE",
        *([f"    {unpack} = leaves"] if leaf_names else []),
        *arg_lines,
        f"    return [{', '.join(names)}]",
    ]
    if not any("dtype" in line for line in arg_lines):
        del args_fn[2]
    functions = "\n".join(leaves_fn) + "\n\n\n" + "\n".join(args_fn)
    return InputsCode(storage_text, functions, leaf_names, list(names), [s is not None for s in sources], list(sources))
