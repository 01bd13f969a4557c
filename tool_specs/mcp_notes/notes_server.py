"""A small MCP server (stdio) for the bundled ``mcp_notes`` domain: a notebook of titled notes.

Its state is exposed as the resource ``seal://state`` (SEAL's verifier compares it with the ground truth's);
a task's initial state arrives as a JSON file named by ``SEAL_MCP_STATE``.
"""

import json
import os

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

server = FastMCP("notes", log_level="WARNING")
notes: dict[str, str] = {}
if os.environ.get("SEAL_MCP_STATE"):
    with open(os.environ["SEAL_MCP_STATE"]) as file:
        notes.update(json.load(file).get("notes", {}))

READ_ONLY = ToolAnnotations(readOnlyHint=True)


@server.tool()
def add_note(title: str, text: str) -> str:
    """Add a note, or replace the text of the note with this title."""
    notes[title] = text
    return f"saved {title!r} ({len(notes)} notes)"


@server.tool(annotations=READ_ONLY)
def list_notes() -> str:
    """The titles of all notes, sorted."""
    return json.dumps(sorted(notes))


@server.tool(annotations=READ_ONLY)
def read_note(title: str) -> str:
    """The text of the note with this title."""
    if title not in notes:
        raise ValueError(f"no note titled {title!r}")
    return notes[title]


@server.tool()
def delete_note(title: str) -> str:
    """Delete the note with this title."""
    if title not in notes:
        raise ValueError(f"no note titled {title!r}")
    del notes[title]
    return f"deleted {title!r}"


@server.resource("seal://state", mime_type="application/json")
def state() -> str:
    """Everything a task can change: the notes."""
    return json.dumps({"notes": notes}, sort_keys=True)


if __name__ == "__main__":
    server.run("stdio")
