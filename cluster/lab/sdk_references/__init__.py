"""The conformance pack's reference servers and its published table.

Layer: cluster (the lab; nothing of the product imports it). Modules, bottom to top::

    table           `notes-cluster conformance-table`: the pack against ours and each reference
      |
    references      starts N instances of a reference (`open_reference`), waits for their URLs
      |
    reference_sdk   the Python SDK reference (``python -m``; over ``cluster.bench.sdk_server``)
    reference_ts/   the TypeScript SDK reference (``server.ts``, Node 22, ``npm ci`` installs it)

Neither the run family (simulate, workers, remote, failover) nor the bench imports these; the
run against a foreign server (``cluster.targets.foreign``) takes their URLs, not their code.
"""
