"""The MRTR exactly-once conformance pack: black-box checks of any MCP server's
confirm-before-act tool (``notes-cluster conformance``).

Layer: loadgen (a client). Speaks the wire protocol with loadgen's own definitions
(``loadgen.transport``), never the node's helpers, so it can judge our nodes as impartially as
a server built on an official SDK. Modules, bottom up:

    wire.py       one HTTP exchange, recorded as the evidence a check quotes
    forms.py      answers a form from its ``requestedSchema`` (accept, another pick, decline)
    checks.py     the check record (shaped like the official conformance suite's) and the table
    scenarios.py  the scenarios, one function each, judged from replies and observed effects
    pack.py       options, the run (control first, then the rest side by side), the report
"""
