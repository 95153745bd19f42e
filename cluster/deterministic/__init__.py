"""Deterministic simulation: a whole run in one trio run under virtual time, drawn from a seed.

Layer: cluster. ``world`` makes a process's trio run, clocks and random draws a function of the
seed; ``run`` composes a simulation (nodes, load, in-process store, check) inside it;
``divergence`` names the first step where two runs of one seed differ; ``command`` is the CLI's
entry (``simulate --deterministic``, ``--check-determinism``, ``--replay``); ``search`` runs
many seeds on an executor (``fleet``: a kept process pool, or Dask) and shrinks the failing ones.
"""

HASH_SEED = "0"
"""``PYTHONHASHSEED`` of every deterministic run (``str`` hashing unrandomized)."""
