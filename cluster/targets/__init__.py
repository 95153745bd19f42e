"""The harness's targets, and the runs that drive them.

Layer: cluster. What ``loadgen.run.target.Target`` describes, each in one module: in-process
nodes (``in_process``, with ``legacy_nodes``), running HTTP nodes (``remote``), a foreign MCP
server without our journal (``foreign``); the deterministic universe is
``cluster.deterministic``. ``simulate`` composes the run pipeline over the in-process target
(``notes-cluster simulate``), ``workers`` runs it in N load processes.
"""
