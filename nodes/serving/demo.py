"""The demo fixture behind ``notes-cluster serve --demo`` and the default simulation.

Layer: nodes (serving). Everything here is a clearly named DEMO value: the tokens are published
in the documentation and the state key is generated per process, so nothing here is a secret
worth keeping.

alice (token alice-demo-token) file:///Users/alice/Documents/Notes, .../Archive,
file:///Shared/Team bob (token bob-demo-token) file:///Users/bob/Notes, file:///Shared/Team
file:///Users/alice/Documents/Notes-evil exists and nobody is authorized for it.
"""

from __future__ import annotations

from dataclasses import dataclass

DEMO_TENANT = "demo"
DEMO_SERVER_NAME = "notes-cluster-demo"

ALICE_NOTES = "file:///Users/alice/Documents/Notes"
ALICE_ARCHIVE = "file:///Users/alice/Documents/Archive"
ALICE_EVIL = "file:///Users/alice/Documents/Notes-evil"
BOB_NOTES = "file:///Users/bob/Notes"
TEAM = "file:///Shared/Team"

DEMO_WORKSPACES: dict[str, str] = {
    ALICE_NOTES: DEMO_TENANT,
    ALICE_ARCHIVE: DEMO_TENANT,
    ALICE_EVIL: DEMO_TENANT,
    BOB_NOTES: DEMO_TENANT,
    TEAM: DEMO_TENANT,
}

DEMO_ARCHIVES: dict[str, str] = {ALICE_NOTES: ALICE_ARCHIVE}
"""Workspace -> its archive workspace (``notes_archive``): alice's Notes archive to her Archive."""

DEMO_GRANTS: dict[str, tuple[str, ...]] = {
    "alice": (ALICE_NOTES, ALICE_ARCHIVE, TEAM),
    "bob": (BOB_NOTES, TEAM),
}

DEMO_TOKENS: dict[str, str] = {
    "alice-demo-token": "alice",
    "bob-demo-token": "bob",
}
"""Demo bearer tokens (published in the documentation). Real deployments list only token hashes."""


@dataclass(frozen=True)
class DemoNote:
    """One note the demo seeds: where, what, and a creation date (ms; 0 = now) to tell the three
    TPS reports apart (2023-07-01, 2024-07-01, 2025-07-01)."""

    workspace: str
    title: str
    body: str
    owner: str
    created_ms: int = 0


DEMO_NOTES: tuple[DemoNote, ...] = (
    DemoNote(ALICE_NOTES, "TPS report", "TPS report, 2023 edition.", "alice", 1_688_212_800_000),
    DemoNote(ALICE_NOTES, "TPS report", "TPS report, 2024 edition.", "alice", 1_719_835_200_000),
    DemoNote(ALICE_NOTES, "TPS report", "TPS report, 2025 edition.", "alice", 1_751_371_200_000),
    DemoNote(ALICE_NOTES, "Groceries", "Milk, eggs, coffee.", "alice"),
    DemoNote(ALICE_EVIL, "TPS report", "Lookalike workspace: nobody may touch this.", "alice"),
    DemoNote(BOB_NOTES, "TPS report", "Bob's own TPS report.", "bob"),
    DemoNote(TEAM, "Standup", "Daily standup notes.", "alice"),
)
