"""Experiments that compose a cluster with a load. Layer: cluster (on top); nothing below imports
these. The run family sits here (simulate, workers, remote, legacy_nodes, failover, and foreign:
the race workload against a server without our journal); two products have subpackages of their
own: ``bench`` (the benchmark and its SDK peer) and ``conformance`` (the pack's reference
servers and its table). ``sdk_server`` is what the bench's peer and the pack's Python reference
share, so that neither subpackage imports the other."""
