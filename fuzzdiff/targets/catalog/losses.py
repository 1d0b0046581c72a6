"""losses targets (to be filled)."""
