"""Custom resource models (the one source of the CRDs and REST schemas)."""
