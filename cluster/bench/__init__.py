"""The benchmark a user runs: ``notes-cluster bench``, and what only it uses.

Layer: cluster (on top; nothing else of the product imports it; the lab, ``cluster.lab``, builds
on it, and it imports nothing of the lab: what a node's CPU is made of, the HTTP server alone,
the Redis client alone and metrics on ÷ off, is the lab's ``bench-parts``). Modules by row, top
to bottom; a module imports only modules of lower rows, or listed before it in its own row::

    commands     run              `bench`: scenarios 1-5, the report's JSON and targets
                      |
    scenarios    http_scenarios   HTTP points and ours beside the SDK peer, driven by wrk;
                                  servers alternated in slots (`alternate`)
                      |
    shared       context          options, plan, one run's state (`Bench`), the Redis held
                                  under lock, the machine, the report files
                      |
    parts        flows            the in-process flow loop (`SeededNote`, `run_flows`)
                 procs            node and server processes, CPU from /proc (`Cpu`)
                 database         the bench's Redis: its own server or a user's, guarded
                 seeding          notes written straight into Redis; the raw-script flow
                 wrk              wrk and `wrk_flow.lua`, pinned off the servers' core
                 budget           the budget per flow: ours beside the peer, server, Redis,
                                  load client (pure)
                 report           `bench.md` from the JSON, the budget first (pure)
                 sdk_server       the official SDK's server over our store (the peer's, and
                                  the lab's conformance reference's)
                      |
    processes    peer_memory      the SDK peer's notes in memory
    (python -m)  peer_sdk         the SDK peer (over `sdk_server`, shared with the lab's
                                  conformance reference)

The scenarios start the last row as ``python -m cluster.bench.NAME`` processes. The
bench imports the run family only for its steady-state scenario (``cluster.targets.simulate``).
"""
