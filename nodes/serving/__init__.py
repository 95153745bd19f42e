"""A node's production edge: what an operator deploys.

Layer: nodes. The ASGI app (``app``), the HTTP server over uvicorn (``http_server``), one node
as an OS process (``process``), the operator's endpoints (health, metrics port: ``operator``),
the configuration file and the demo fixture as settings (``settings``, ``demo``,
``load_fixture``), durability at start (``durability``) and children that stop with their parent
(``lifeline``). Imports ``nodes`` and ``store`` only: a node process loads nothing of the load
generator, the simulation seams (``store.simulation``) or the lab.
"""
