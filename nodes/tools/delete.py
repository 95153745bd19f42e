"""notes_delete: pick and confirm a note through form elicitation, then delete it exactly once.

Layer: node, protocol core. The two-round flow is ``nodes.tools.confirming.ConfirmingTool``; this
module names the store operation (``delete``) and the words.
"""

from __future__ import annotations

from nodes.tools.confirming import ConfirmArgs, ConfirmingTool

FORM_KEY = "confirm_delete"
"""The key of our one input request; the answer comes back under the same key."""


class DeleteArgs(ConfirmArgs):
    """``workspaceUri`` and ``title``."""


class DeleteTool(ConfirmingTool[DeleteArgs]):
    name = "notes_delete"
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
    form_key = FORM_KEY
    op = "delete"
    done = "deleted"
    question = "Which note should be deleted?"
    confirm_title = "Delete this note permanently"
