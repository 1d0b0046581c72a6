"""fuzzdiff's tests; a package so that the zoo imports as ``tests.selftest.zoo``."""
