"""The example as data: a Case, its arguments' shapes, layouts and values, and
the tensors it makes, bit for bit, from a counter-based random stream.

Nothing here knows a target or a check, so that strategies, targets and
records all read the same plain data.
"""
