"""The package version, in a module of its own so that any layer can read it
(pyproject.toml takes it from here too)."""

__version__ = "0.1.0"
