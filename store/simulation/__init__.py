"""Simulation seams of the store: what a deterministic world puts in place of the OS and Redis."""
