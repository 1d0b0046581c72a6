"""conv targets (to be filled)."""
