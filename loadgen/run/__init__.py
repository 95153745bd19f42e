"""The one way a run happens.

Layer: loadgen. Every run (``simulate``, its ``--workers`` processes, ``loadgen`` against remote
nodes) and every check of finished folders (``notes-cluster check``) goes through this pipeline::

    plan ──► load ──► record ──► settle ──► store facts ──► check ──► judge ──► results ──► report
    Plan     Target   RunFolder  settle     RunFolder       partition judged    Results     report,
             +runner  history                .dump_store_   / checker                       pictures
                                              facts

- ``target``: ``Target``, what a run runs against (a Protocol: implemented in ``cluster``, as
  ``Transport`` is): its transport, key ring and audience, store access for the facts, key
  prefix, replay grace, tenants, and its faults.
- ``folder``: ``RunFolder``, the only code that names or reads a run's files.
- ``results``: ``Results``, the only builder and reader of ``results.json``.
- ``pipeline``: ``run(target, plan, folder)`` and ``recheck(folders)``, with the one wait for
  expiry (``settle``, on the Redis clock) and the one place the exercise verdict is applied
  (``judged``).

The modules import one way: ``folder`` ← ``results`` ← ``pipeline``; ``target`` stands beside.
"""
