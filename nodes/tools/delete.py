"""notes_delete: pick and confirm a note through form elicitation, then delete it exactly once.

Layer: node, protocol core. The two-round flow is ``nodes.tools.confirming.ConfirmingTool``; this
module names its row of the confirming table (``DELETE``) and the words.
"""

from __future__ import annotations

from nodes.tools.confirming import ConfirmArgs, ConfirmingTool
from nodes.tools.confirming_table import DELETE


class DeleteArgs(ConfirmArgs):
    """``workspaceUri`` and ``title``."""


class DeleteTool(ConfirmingTool[DeleteArgs]):
    kind = DELETE
    name = DELETE.tool
    title = "Delete note"
    description = (
        "Delete a note titled `title` in `workspaceUri`. Always asks the user to pick the note "
        "and confirm (form elicitation), even when only one note matches."
    )
    args_model = DeleteArgs
    annotations = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
    output_schema = {
        "type": "object",
        "properties": {"deleted": {"type": "boolean"}, "noteId": {"type": "string"}},
        "required": ["deleted"],
    }
    question = "Which note should be deleted?"
    confirm_title = "Delete this note permanently"
