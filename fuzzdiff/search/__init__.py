"""One check on one target, searched and settled: a case run and its exceptions
turned into verdicts, fuzzing under Hypothesis, a failure rerun in a fresh
process, whose bug it is, and its root cause.
"""
