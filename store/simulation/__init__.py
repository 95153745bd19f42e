"""Simulation seams of the store: what only a simulation turns on (planted defects, fault
points, the in-memory transport). A node process imports nothing from here but what a seam's
off switch needs (tests/test_plants.py holds a node process to it)."""
