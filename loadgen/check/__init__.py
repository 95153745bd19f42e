"""The checker: a recorded history held to the store's journal and final state, and to the model.

Layer: loadgen. Pure (no I/O) but for ``partition``, which reads run folders. Its modules, top
to bottom; each imports only modules below it (``tests/test_import_cycles.py`` fails on any
cycle), and the shared types sit at the bottom, as h11 keeps ``_events.py``::

    partition       the check over run folders, tenant by tenant  -> invariants, merge, limits,
                                                                     verdict (loadgen.run.folder)
    merge           per-tenant results folded verdict by verdict -> model_search, verdict
    exercise        the ``exercised`` verdict (applied by run.pipeline) -> verdict (loadgen.tally)
    blackbox_check  the check of a target without a journal       -> context, verdict
    invariants      ``check``: every invariant of one run         -> reads, writes, model_search,
                                                                     limits, context, verdict
    reads           reads held to the journal, notes_setup        -> timeline, limits, context,
                                                                     verdict
    writes          creates, updates, plain moves                 -> context, verdict
    model_search    an order that explains every answer           -> answers, timeline, model,
                                                                     limits, context
    answers         each confirm in the model's words; groups     -> timeline, model, context
    timeline        the journal's clock: anchors, bounds, titles  -> model, limits, context
    limits          configured bounds, unknown outcomes           -> context, verdict
    context         Call, LearnedState, Context (paired, indexed) -> pairing (loadgen.history)
    pairing         which answer completes which send              -> nothing
    model           the sequential model of one state             -> nothing
    verdict         Verdict, CheckResult, Finding, ``verdict``    -> nothing

Outside the package the checker uses ``loadgen.history`` (and, at the top, ``loadgen.tally``,
``loadgen.workload``'s race kinds and ``loadgen.run.folder``); nothing below ``exercise`` and
``partition`` knows the load.
"""
