"""simulator adapter."""
