"""norms targets (to be filled)."""
