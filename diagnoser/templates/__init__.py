"""Templates for reports (package data)."""
