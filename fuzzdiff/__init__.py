"""fuzzdiff: property-based fuzzing of derivatives in PyTorch.

``fuzzdiff.check(fn, "x: n m")`` fuzzes the user's own function, autograd.Function
or custom op with every check that applies; ``fuzzdiff.assert_ok`` does the same
inside a test (the public API of docs/pages/design.md).
"""

from fuzzdiff.version import __version__

__all__ = ["check", "assert_ok", "Report", "Failure", "Target", "__version__"]


def __getattr__(name):
    # startup time: `import fuzzdiff` stays cheap (no torch) for tools that only
    # want the version or a submodule such as the pytest plugin
    if name in ("check", "assert_ok", "Report", "Failure"):
        from fuzzdiff import api  # startup time, as above

        return getattr(api, name)
    if name == "Target":
        from fuzzdiff.targets.target import Target  # startup time, as above

        return Target
    raise AttributeError(f"module 'fuzzdiff' has no attribute {name!r}")
