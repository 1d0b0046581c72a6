"""A few lines of torch that show one localized failure: the minimal repro.

Where fuzzdiff.search.localize finds the op (or the few ops) that fail on
their own, the report's repro is a short torch-only script: the inputs the
op saw, built with their values, strides and offsets; the op, called by its
overload; and the failing check's identity asserted for it, or its mode
entered, where the op raises. The identities are the checks' own, written
plainly with probes of the script's own generator: each candidate script is
run here, and only one that fails as the op failed is kept.
"""

from __future__ import annotations

import contextlib
import io
import traceback
from collections.abc import Iterator, Sequence

import torch

from fuzzdiff.case.materialize import Inputs
from fuzzdiff.search.aten_program import tensor_literal
from fuzzdiff.verdict import Verdict, error_shape

__all__ = ["op_script", "IDENTITIES"]

# The identities a script asserts (or whose mode it enters), by check, in the order tried.
IDENTITIES = {
    "grad": ("reverse",),
    "forward": ("forward", "reverse"),
    "gradgrad": ("reverse-over-reverse", "forward-over-reverse"),
    "forward2": ("forward-over-forward", "reverse-over-forward", "forward-over-reverse", "reverse-over-reverse"),
}
SEEDS = (0, 1)  # the probes' generator seeds tried
# What each identity compares, for the script's docstring.
SAYS = {
    "reverse": "<J^T v, u> by reverse mode against central finite differences <v, J u>, in float64",
    "forward": "<v, J u> by forward mode against central finite differences, in float64",
    "reverse-over-reverse": "the derivative of <J^T v, w> along u by reverse over reverse mode, against central "
    "finite differences of it",
    "forward-over-reverse": "the derivative of <J^T v, w> along u by forward over reverse mode, against central "
    "finite differences of it",
    "forward-over-forward": "<v, d2f[u, w]> by nested torch.func.jvp, against central finite differences along w of "
    "<J^T v, u>",
    "reverse-over-forward": "<v, d2f[u, w]> by reverse mode over forward mode, against central finite differences "
    "along w of <J^T v, u>",
    "reverse-over-reverse (forward2)": "<v, d2f[u, w]> by reverse over reverse mode, against central finite "
    "differences along w of <J^T v, u>",
    "forward-over-reverse (forward2)": "<v, d2f[u, w]> by forward over reverse mode, against central finite "
    "differences along w of <J^T v, u>",
}

_PRELUDE = '''
def outputs(*leaves):
    """The function's floating outputs, as a function of the differentiable inputs."""
    {unpack}
    out = {call}({args})
    out = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in out if isinstance(o, torch.Tensor) and o.is_floating_point()]


def dot(a, b):
    return sum(float((x * y).sum()) for x, y in zip(a, b) if x is not None and y is not None)


def zeros_for(grads, like):
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, like)]


def along(h, directions, eps):
    """Central differences of the list-valued h at X along directions."""
    with torch.no_grad():
        plus = h(*[x.detach() + eps * d for x, d in zip(X, directions)])
        minus = h(*[x.detach() - eps * d for x, d in zip(X, directions)])
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]


generator = torch.Generator().manual_seed({seed})


def probe(t):
    return torch.randn(t.shape, dtype=t.dtype, generator=generator)


U = [probe(x) for x in X]
V = [probe(o) for o in outputs(*X)]
W = [probe(x) for x in X]
EPS = 1e-6
'''

_JUDGE = """
error, allowed = abs(analytic - numeric), 1e-10 + 1e-7 * (abs(analytic) + abs(numeric)) + 4 * noise
print(f"{identity}: analytic {{analytic!r}}, finite differences {{numeric!r}}")
print(f"error {{error:.3g}}, allowed {{allowed:.3g}}")
assert error <= allowed, "{identity}: the op's derivative disagrees with finite differences of the op"
"""

_FIRST = """
n1, n2 = dot(V, along(outputs, U, EPS)), dot(V, along(outputs, U, 2 * EPS))
numeric, noise = n1, abs(n1 - n2)
"""

_H = '''
def h(eps, cotangent, seen_through, direction):
    """<J^T cotangent, seen_through> at X + eps * direction, by first-order reverse mode."""
    moved = [(x.detach() + eps * d).requires_grad_() for x, d in zip(X, direction)]
    grads = torch.autograd.grad(outputs(*moved), moved, cotangent, allow_unused=True)
    return dot(zeros_for(grads, moved), seen_through)


def second_numeric(cotangent, seen_through, direction):
    d1 = (h(EPS, cotangent, seen_through, direction) - h(-EPS, cotangent, seen_through, direction)) / (2 * EPS)
    d2 = (h(2 * EPS, cotangent, seen_through, direction) - h(-2 * EPS, cotangent, seen_through, direction)) / (4 * EPS)
    return d1, abs(d1 - d2)
'''

_IDENTITY = {
    "reverse": _FIRST
    + """
out = outputs(*X)
analytic = dot(zeros_for(torch.autograd.grad(out, X, V, allow_unused=True), X), U)
""",
    "forward": _FIRST
    + """
with fwAD.dual_level():
    out = outputs(*[fwAD.make_dual(x.detach(), u) for x, u in zip(X, U)])
    tangents = [fwAD.unpack_dual(o).tangent for o in out]
analytic = dot(V, zeros_for(tangents, out))
""",
    # gradgrad: h(x) = <J(x)^T v, w>; its derivative along u, two ways
    "reverse-over-reverse": _H
    + """
numeric, noise = second_numeric(V, W, U)
grads = torch.autograd.grad(outputs(*X), X, V, create_graph=True, allow_unused=True)
total = sum((g * w).sum() for g, w in zip(grads, W) if g is not None and g.requires_grad)
second = torch.autograd.grad(total, X, allow_unused=True) if isinstance(total, torch.Tensor) else [None] * len(X)
analytic = dot(zeros_for(second, X), U)
""",
    "forward-over-reverse": _H
    + """
numeric, noise = second_numeric(V, W, U)
with fwAD.dual_level():
    duals = [fwAD.make_dual(x, u) for x, u in zip(X, U)]
    grads = torch.autograd.grad(outputs(*duals), duals, V, create_graph=True, allow_unused=True)
    tangents = [None if g is None else fwAD.unpack_dual(g).tangent for g in grads]
analytic = dot(zeros_for(tangents, X), W)
""",
    # forward2: <v, d2f[u, w]>, against central differences along w of <J^T v, u>
    "forward-over-forward": _H
    + """
numeric, noise = second_numeric(V, U, W)
primals = tuple(x.detach() for x in X)
tangents = torch.func.jvp(
    lambda *p: tuple(torch.func.jvp(lambda *q: tuple(outputs(*q)), p, tuple(U))[1]), primals, tuple(W)
)[1]
analytic = dot(V, tangents)
""",
    "reverse-over-forward": _H
    + """
numeric, noise = second_numeric(V, U, W)
with fwAD.dual_level():
    out = outputs(*[fwAD.make_dual(x, u) for x, u in zip(X, U)])
    tangents = [fwAD.unpack_dual(o).tangent for o in out]
tangents = zeros_for(tangents, out)
through = any(t.requires_grad for t in tangents)
grads = torch.autograd.grad(tangents, X, V, allow_unused=True) if through else [None] * len(X)
analytic = dot(zeros_for(grads, X), W)
""",
}
_IDENTITY["reverse-over-reverse (forward2)"] = (
    _IDENTITY["reverse-over-reverse"]
    .replace("second_numeric(V, W, U)", "second_numeric(V, U, W)")
    .replace("analytic = dot(zeros_for(second, X), U)", "analytic = dot(zeros_for(second, X), W)")
)
_IDENTITY["forward-over-reverse (forward2)"] = _IDENTITY["forward-over-reverse"]


def _key(check: str, identity: str) -> str:
    """The snippet of ``identity`` for ``check`` (forward2 contracts its probes otherwise than gradgrad)."""
    if check == "forward2" and identity in ("reverse-over-reverse", "forward-over-reverse"):
        return f"{identity} (forward2)"
    return identity


def _view(t: torch.Tensor) -> str:
    """``t`` written out: its whole storage's values, viewed with its metadata."""
    size = t.untyped_storage().nbytes() // max(t.element_size(), 1)
    flat = t.detach().as_strided((size,), (1,), 0)
    shape, stride = tuple(t.shape), tuple(t.stride())

    def tup(v: Sequence[int]) -> str:
        return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"

    return f"{tensor_literal(flat)}.as_strided({tup(shape)}, {tup(stride)}, {t.storage_offset()})"


def _inputs(inputs: Inputs) -> tuple[list[str], str, str]:
    """The lines that build the inputs, the unpacking of ``leaves`` and the arguments, in terms of them."""
    lines = ["# the inputs, with the values, strides and offsets the call gave them"]
    for k, leaf in enumerate(inputs.leaves):
        lines.append(f"l{k} = {_view(leaf)}.requires_grad_()")
    args: list[str] = []
    for i, (arg, source) in enumerate(zip(inputs.args, inputs.sources)):
        same = next((j for j in range(i) if inputs.args[j] is arg), None)
        if same is not None:
            args.append(args[same])
        elif source is None:
            lines.append(f"c{i} = {_view(arg)}")
            args.append(f"c{i}")
        elif source[1] is None:
            args.append(f"l{source[0]}")
        else:
            args.append(
                f"l{source[0]}.as_strided({tuple(arg.shape)!r}, {tuple(arg.stride())!r}, {arg.storage_offset()})"
            )
    lines.append(f"X = [{', '.join(f'l{k}' for k in range(len(inputs.leaves)))}]")
    names = [f"l{k}" for k in range(len(inputs.leaves))]
    unpack = f"{', '.join(names)}{',' if len(names) == 1 else ''} = leaves" if names else "pass"
    return lines, unpack, ", ".join(args)


def _candidates(
    check: str, title: str, code: str, call: str, inputs: Inputs, random_seed: int | None
) -> Iterator[tuple[str, str]]:
    lines, unpack, args = _inputs(inputs)
    for identity in IDENTITIES.get(check, ()):
        for seed in SEEDS:
            seeding = ""
            if random_seed is not None:  # a random op: the same draws at every call
                seeding = f"\n\ndef seeded(*args):\n    torch.manual_seed({random_seed})\n    return {call}(*args)\n"
            header = f'"""{title}.\n\n{SAYS[_key(check, identity)]}. Written by fuzzdiff; torch only."""\n'
            prelude = _PRELUDE.format(
                unpack=unpack, call="seeded" if random_seed is not None else call, args=args, seed=seed
            )
            body = _IDENTITY[_key(check, identity)]
            judge = _JUDGE.format(identity=identity)
            text = "\n".join(
                [
                    header,
                    "import torch",
                    "import torch.autograd.forward_ad as fwAD",
                    "",
                    code.rstrip() + seeding,
                    "",
                    *lines,
                    prelude.rstrip(),
                    body.rstrip(),
                ]
            )
            yield identity, text + "\n" + judge.lstrip("\n")


def _raised(script: str) -> BaseException | None:
    """What running ``script`` here raised (None: it ran through)."""
    try:
        # what it prints is for whoever runs it later; the generators it seeds are put back
        with contextlib.redirect_stdout(io.StringIO()), torch.random.fork_rng(devices=[]):
            exec(compile(script, "<one-op script>", "exec"), {"__name__": "__fuzzdiff_script__"})  # noqa: S102 - ours
    except Exception as e:  # noqa: BLE001 - what it raises is the answer
        traceback.clear_frames(e.__traceback__)
        return e
    return None


def op_script(
    check: str,
    title: str,
    code: str,
    call: str,
    inputs: Inputs,
    failed: Verdict,
    random_seed: int | None = None,
) -> str | None:
    """The first candidate script that fails as ``failed`` did: it asserts a
    mismatch, or raises the same exception (type and message, numbers aside).
    ``code`` defines the function ``call``; ``inputs`` are what it is called
    at; ``random_seed``: the function draws random numbers, and every call is
    seeded with it. None where no candidate fails so (or the check has none)."""
    exception = failed.errors.get("exception")
    for _identity, script in _candidates(check, title, code, call, inputs, random_seed):
        raised = _raised(script)
        if raised is None:
            continue
        if exception is None and isinstance(raised, AssertionError):
            return script
        if exception is not None and type(raised).__name__ == exception and _same(raised, failed):
            return _ending_at_the_raise(script)
    return None


def _same(raised: BaseException, failed: Verdict) -> bool:
    return error_shape(Verdict("fail", f"raised {type(raised).__name__}: {raised}")) == error_shape(failed)


def _ending_at_the_raise(script: str) -> str:
    """A script that raises needs no judgement after the raise."""
    head, _, _ = script.partition("\nerror, allowed =")
    return head.rstrip() + "\n"
