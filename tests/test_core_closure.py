"""The node's protocol core stays sans-IO: its import closure is the stdlib, pydantic,
cryptography, two pure text libraries (the title rules), orjson, msgspec, and of our own code only
the pure store modules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ("nodes.protocol", "nodes.tools", "nodes.lifecycle", "nodes.tools.confirming_table")
THIRD_PARTY = {
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_extensions",
    "typing_inspection",
    "cryptography",
    "cffi",
    "regex",  # Unicode properties of title characters: pure text, no I/O
    "confusable_homoglyphs",  # UTS #39 confusables data, read once at import: no I/O after
    "orjson",  # JSON bytes in and out (the canonical digests' fast path): no I/O
    "emoji",  # the RGI emoji sequences a title may hold (ZWJ, tag flags): data, no I/O
    "msgspec",  # the sealed state's payload, encoded and parsed in memory: no I/O
}
OURS = {
    "store.api",
    "store.keys",
    "store.randomness",
    "store.fault_points",
    "store.fast_init",
    "store.skeletons",
}
"""The pure store modules: types and key names; the random source (``os.urandom`` unless a
simulation seeds it); the fault points (a context variable: off unless a simulation sets it);
the records' cheaper ``__init__`` (``dataclasses`` and nothing else); a title's UTS #39 skeleton
(the lookalike index; pure text)."""


def imported_by(modules: tuple[str, ...]) -> set[str]:
    """Every module a fresh interpreter holds after importing ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {list(modules)!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return set(json.loads(out.stdout))


def test_the_core_imports_only_the_stdlib_pydantic_cryptography_and_pure_store_modules() -> None:
    loaded = imported_by(CORE)
    tops = {m.split(".")[0] for m in loaded}
    foreign = {
        t for t in tops - set(sys.stdlib_module_names) - {"nodes", "store"} if not t.startswith("_")
    }
    assert foreign <= THIRD_PARTY, sorted(foreign - THIRD_PARTY)
    assert {m for m in loaded if m.startswith("store.")} <= OURS
    assert not {
        m for m in loaded if m.startswith(("nodes.legacy", "nodes.http", "nodes.setup_page"))
    }
    assert not tops & {"cluster", "loadgen", "trio", "anyio", "coredis", "redis", "httpx"}
