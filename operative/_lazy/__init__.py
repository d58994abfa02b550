"""Lazy agents: a definition loaded on first use, and the run that stands in meanwhile."""
