"""A mismatch confirmed before it is called a failure: a check's ladder of
steps and the steps it is built from, the tolerance policy, comparison of
results, low precision judged against float64, and the finite-difference
identities' own steps.
"""
