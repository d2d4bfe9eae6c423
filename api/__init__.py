"""api adapter."""
