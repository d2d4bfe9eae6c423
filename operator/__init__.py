"""operator adapter."""
