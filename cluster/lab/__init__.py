"""The lab: what the project ran on itself to choose its components, apart from the product.

Layer: cluster (on top). Nothing a user runs imports it: only the lab's own commands
(``bench-servers``, ``conformance-table``, ``serve-reference``, ``failover-experiment``) reach it,
lazily, from ``cluster.cli`` (tests/test_import_direction.py). Modules:

    servers            `bench-servers`: HTTP servers and apps side by side
    server_variants    one app on one HTTP server (``python -m``), for `bench-servers`
    ab_nodes           A/B of two node source trees over HTTP
    instructions       instruction counts of one flow under callgrind, A against B
    instructions_child the node a count runs (``python -m``)
    failover           `failover-experiment`: a Redis Cluster master failed over under load
    sdk_references/    the official SDKs' reference servers for the conformance pack, and its
                       published table (`conformance-table`)
"""
