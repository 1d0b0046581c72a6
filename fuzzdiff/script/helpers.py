"""Small functions a script may need, as source text, each with what it needs.

They restate, in plain torch, what fuzzdiff's paths compute (reverse and
forward mode, central differences, inner products in double precision,
tensor comparison), so that a script shows the numbers fuzzdiff saw.
"""

from __future__ import annotations

from fuzzdiff.unsupported import UNSUPPORTED_PATTERNS

__all__ = ["HELPERS", "helper_source"]

HELPERS: dict[str, tuple[str, tuple[str, ...]]] = {}


def _helper(name: str, source: str, *needs: str) -> None:
    HELPERS[name] = (source.strip("\n"), needs)


_helper(
    "outputs",
    '''
def outputs(result):
    """The floating-point tensors in a result (a tensor, tuple, list or dict), in order."""
    if isinstance(result, torch.Tensor):
        return [result] if result.is_floating_point() or result.is_complex() else []
    if isinstance(result, dict):
        result = list(result.values())
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in outputs(r)]
    return []
''',
)

_helper(
    "f",
    '''
def f(*leaves):
    """The function under test as a function of the leaves: its floating-point outputs."""
    return outputs(call(*make_args(leaves)))
''',
    "outputs",
)

_helper(
    "dot",
    '''
def dot(a, b):
    """sum_i <a_i, b_i> in double precision (complex: the real part of <conj(a_i), b_i>)."""
    total = 0.0
    for x, y in zip(a, b):
        if x.numel():
            wide = torch.complex128 if x.is_complex() or y.is_complex() else torch.float64
            p = x.detach().to(wide).conj() * y.detach().to(wide)
            total += float(p.sum().real) if wide.is_complex else float(p.sum())
    return total
''',
)

_helper(
    "absdot",
    '''
def absdot(a, b):
    """sum_i <|a_i|, |b_i|>: the scale a rounding error in dot(a, b) is relative to."""
    total = 0.0
    for x, y in zip(a, b):
        if x.numel():
            wide = torch.complex128 if x.is_complex() or y.is_complex() else torch.float64
            total += float((x.detach().to(wide).abs() * y.detach().to(wide).abs()).sum())
    return total
''',
)

_helper(
    "vjp",
    '''
def vjp(outs, leaves, cotangents, create_graph=False):
    """J^T v for each leaf, by reverse mode (zeros for a leaf the outputs do not reach)."""
    pairs = [(o, v) for o, v in zip(outs, cotangents) if o.requires_grad]
    if not pairs:
        return [torch.zeros_like(l) for l in leaves]
    grads = torch.autograd.grad([o for o, _ in pairs], list(leaves), [v for _, v in pairs],
                                allow_unused=True, create_graph=create_graph)
    return [torch.zeros_like(l) if g is None else g for g, l in zip(grads, leaves)]
''',
)

_helper(
    "same_layout",
    '''
def same_layout(primal, tangent):
    """The tangent stored with the primal's exact sizes, strides and offset.

    make_dual copies a tangent with other metadata into the primal's layout; for a
    stride-0 primal that copy is an overlapping write and raises, so the tangent
    (constant along those dims) is handed over in that very layout instead.
    """
    tangent = tangent.to(primal.dtype)
    if 0 not in primal.stride():
        return tangent
    numel = primal.untyped_storage().nbytes() // primal.element_size()
    out = primal.new_zeros(numel).as_strided(primal.shape, primal.stride(), primal.storage_offset())
    sizes = [min(n, 1) if s == 0 else n for n, s in zip(primal.shape, primal.stride())]
    out.as_strided(sizes, out.stride(), out.storage_offset()).copy_(
        tangent.as_strided(sizes, tangent.stride(), tangent.storage_offset()))
    return out
''',
)

_helper(
    "jvp",
    '''
def jvp(f, leaves, tangents):
    """The outputs of f and their tangents J u, by forward mode (dual tensors)."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(l, same_layout(l, u)) for l, u in zip(leaves, tangents)]
        primals, tans = [], []
        for o in f(*duals):
            p, t = fwAD.unpack_dual(o)
            primals.append(p)
            tans.append(torch.zeros_like(p) if t is None else t)
    return primals, tans
''',
    "same_layout",
)

_helper(
    "central",
    '''
def central(f, leaves, directions, eps):
    """(f(x + eps u) - f(x - eps u)) / (2 eps) for each output, without autograd."""
    leaves = [l.detach() for l in leaves]
    directions = [u.to(l.dtype) for l, u in zip(leaves, directions)]
    with torch.no_grad():
        plus = f(*[torch.add(l, u, alpha=eps) for l, u in zip(leaves, directions)])
        minus = f(*[torch.add(l, u, alpha=-eps) for l, u in zip(leaves, directions)])
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]
''',
)

_helper(
    "finite_difference",
    '''
def finite_difference(v, u):
    """<v, J u> by central differences in float64 at the same values, and its error estimate:
    truncation (the change when the step doubles) plus round-off (eps_mach |f| / eps)."""
    x64 = make_leaves(torch.float64, requires_grad=False)
    with torch.no_grad():
        out = f(*x64)
    d1, d2 = dot(v, central(f, x64, u, EPS)), dot(v, central(f, x64, u, 2 * EPS))
    return d1, abs(d1 - d2) + 2.0**-52 / EPS * absdot(v, out)
''',
    "f",
    "dot",
    "absdot",
    "central",
)

_helper(
    "judge",
    '''
def judge(identity, analytic, reference, scale, noise=0.0):
    """Print both sides of an identity; (agree, summary) with the allowed error
    ATOL + RTOL * scale + 4 * noise (noise: the reference's own error estimate)."""
    if math.isnan(analytic) != math.isnan(reference):
        error = math.inf
    elif analytic == reference:
        error = 0.0
    else:
        error = abs(analytic - reference)
    allowed = ATOL + RTOL * scale + 4 * noise
    relative = error / abs(reference) if reference else math.inf if error else 0.0
    print(f"{identity}:")
    print(f"  analytic   {analytic!r}")
    print(f"  reference  {reference!r}")
    print(f"  abs error  {error:.3g}   rel error {relative:.3g}   allowed {allowed:.3g}")
    return error <= allowed, f"{identity}: {analytic!r} vs {reference!r} (abs error {error:.3g})"
''',
)

_helper(
    "compare",
    '''
def max_abs(t):
    """The largest finite |t| (0 if none); a mask or an index counts as numbers."""
    t = t.detach()
    finite = (t if t.is_floating_point() or t.is_complex() else t.to(torch.float64)).abs()
    finite = finite[torch.isfinite(finite)]
    return float(finite.max()) if finite.numel() else 0.0


def max_abs_error(a, b):
    """Largest |a - b| and where; a nan or inf in one but not the other counts as infinite."""
    a = a.detach().to(torch.complex128 if a.is_complex() else torch.float64)
    b = b.detach().to(a.dtype)
    if a.shape != b.shape:
        return math.inf, ()
    if a.numel() == 0:
        return 0.0, ()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    diff = torch.nan_to_num(torch.where(same, torch.zeros((), dtype=torch.float64), (a - b).abs()),
                            nan=math.inf)
    flat = int(diff.argmax())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
    return float(diff.reshape(-1)[flat]), index


def compare(names, got, expected, scale_floor=0.0):
    """Print each pair's worst error; (agree, summary of the first pair outside
    ATOL + RTOL * scale, where scale is the largest |expected| of that pair)."""
    if len(got) != len(expected):
        return False, f"{len(got)} tensors vs {len(expected)}"
    first = None
    for name, a, b in zip(names, got, expected):
        error, index = max_abs_error(a, b)
        scale = max(max_abs(b), scale_floor)
        allowed = ATOL + RTOL * scale
        at = f" at {list(index)}" if index and error else ""
        if a.shape != b.shape:
            at = f" (shape {list(a.shape)} vs {list(b.shape)})"
        print(f"{name}: max abs error {error:.3g}{at} (scale {scale:.3g}, allowed {allowed:.3g})")
        if not error <= allowed:
            if b.numel() <= 16:
                print(f"  got      {a.detach().tolist()}")
                print(f"  expected {b.detach().tolist()}")
            if first is None:
                first = f"{name}{at}: abs error {error:.3g} (scale {scale:.3g})"
    return first is None, first or "all agree"
''',
)

_helper(
    "skip_missing_formula",
    f'''
UNSUPPORTED = re.compile({"|".join(p.pattern for p in UNSUPPORTED_PATTERNS)!r}, re.I)


def skip_missing_formula(identity, error):
    """Go on without an identity when torch lacks a formula it needs (e.g. no forward-mode
    derivative of some backward), as torch's own messages say. Any other error, a
    NotImplementedError of the function itself included, is a finding and is raised."""
    text = f"{{type(error).__name__}}: {{error}}"
    if not UNSUPPORTED.search(text):
        raise error
    print(f"{{identity}}: not supported by torch here ({{text.splitlines()[0]}})")
''',
)

_helper(
    "finish",
    '''
def finish(results):
    """The last line: MISMATCH (exit status 1) or OK (exit status 0)."""
    if not results:
        print("OK: nothing could be compared (torch lacks the formulas needed)")
        return 0
    bad = [summary for ok, summary in results if not ok]
    if bad:
        print("MISMATCH: " + "; ".join(bad))
        return 1
    print("OK: " + "; ".join(summary for _, summary in results))
    return 0
''',
)

_helper(
    "scatter_to_storage",
    '''
def scatter_to_storage(out, grad, shape, strides, offset):
    """Add the gradient of a strided view into the flat gradient of its storage."""
    index = torch.arange(out.numel()).as_strided(shape, strides, offset)
    out.index_add_(0, index.reshape(-1), grad.reshape(-1).to(out.dtype))
''',
)

_helper(
    "snapshot",
    '''
def snapshot(t):
    """A tensor's metadata and every byte of its storage."""
    meta = (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.requires_grad)
    return meta, bytes(t.untyped_storage()), t.detach().clone()


def changed(watched, before):
    """The first watched tensor whose metadata or storage bytes differ from before."""
    for name, t in watched.items():
        meta, data, values = before[name]
        now_meta, now_data, now_values = snapshot(t)
        if now_meta != meta:
            return f"the metadata of {name}: {meta} -> {now_meta}"
        if now_data != data:
            print(f"{name} before: {values.tolist()}")
            print(f"{name} after:  {now_values.tolist()}")
            return f"the values in the storage of {name}"
    return None
''',
)


def helper_source(names) -> list[str]:
    """The helpers named, with what they need, each once, dependencies first."""
    out: list[str] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        source, needs = HELPERS[name]
        for n in needs:
            add(n)
        out.append(source)

    for n in names:
        add(n)
    return out
