"""shape_ops targets (to be filled)."""
