"""reductions targets (to be filled)."""
