"""Experiments that compose a cluster with a load: simulate, remote load runs, the benchmark and
its SDK peer, the failover experiment. Layer: cluster (on top); nothing below imports these."""
