"""How a target is run: each path returns outputs or derivatives of a leaf function.

A *leaf function* is the target at one case seen as a pure function of the
case's differentiable leaves (fuzzdiff.paths.function). Every path takes one.
"""
