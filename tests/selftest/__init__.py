"""The planted-bug zoo and the self-test that must find every bug.

Imported as ``tests.selftest.zoo`` from the repository root: the name that
records of zoo targets store (``tests.selftest.zoo:TARGETS.<name>``), so a
test, ``fuzzdiff repro`` and a fresh replay process share one module.
"""
