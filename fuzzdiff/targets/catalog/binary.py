"""binary targets (to be filled)."""
