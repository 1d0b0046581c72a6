"""The built-in op catalog. Each module registers one family of targets."""

from fuzzdiff.targets.catalog import (  # noqa: F401
    binary,
    conv,
    custom_ops,
    distributions,
    indexing,
    linalg,
    losses,
    matmul,
    modules,
    norms,
    programs,
    random_layers,
    reductions,
    shape_ops,
    softmax,
    spectral,
    tensorly_ops,
    unary,
)
