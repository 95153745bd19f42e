"""The simulation's side of the store's seams: what a deterministic run switches on.

Layer: store. ``entropy`` (a seeded source for every random byte, the production draw being
``store.randomness``), ``buggify`` (which fault points fire, the sites being
``store.fault_points``), ``memory_transport`` (the store's client over an in-process
fakeredis, ``memory://`` URLs) and ``plants`` (planted defects, ``simulate --deterministic
--plant NAME``). Production code imports the seams' production sides only; a node process never
loads this package (tests/test_plants.py holds a node process to it).
"""
