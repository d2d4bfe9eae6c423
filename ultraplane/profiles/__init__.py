"""Trainium hardware profiles, shipped as data."""
