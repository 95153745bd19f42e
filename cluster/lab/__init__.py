"""The lab: what the project ran on itself to choose its components, apart from the product.

Layer: cluster (on top). Nothing a user runs imports it: only the lab's own commands
(``bench-servers``, ``bench-parts``, ``conformance-table``, ``serve-reference``,
``failover-experiment``) reach it, lazily, from ``cluster.commands.lab``
(tests/test_import_direction.py). It builds on the user's benchmark (``cluster.bench``: its
Redis, its wrk client, its alternation of servers); the bench imports nothing of it. Modules:

    servers            `bench-servers`: HTTP servers and apps side by side
    server_variants    one app on one HTTP server (``python -m``), for `bench-servers`
    fixed_replies      the HTTP server alone: two fixed replies (``python -m``), for both
    parts              `bench-parts`: what one node's CPU per flow is made of (the HTTP server
                       alone, the Redis client, metrics on ÷ off), the budget per flow
    parts_report       `parts.md` from its JSON (pure)
    metrics_switch     metrics on ÷ off in one node process switching between them
    metrics_switch_node  that node process (``python -m``): one node built twice
    redis_clients      the Redis client alone: CPU µs per EVALSHA, client against client
    ab_nodes           A/B of two node source trees over HTTP
    instructions       instruction counts of one flow under callgrind, A against B
    instructions_child the node a count runs (``python -m``)
    failover           `failover-experiment`: a Redis Cluster master failed over under load
    sdk_references/    the official SDKs' reference servers for the conformance pack, and its
                       published table (`conformance-table`)
"""
