"""PyTorch's OpInfo database as fuzz targets (family ``opinfo``): the adapter
that names them (all, some, one, one from a record's stored sample), a sample
built as a target, the call its scripts copy, the stored sample, which checks
apply, what fuzzdiff declares about ops, and their known discrepancies.
"""
