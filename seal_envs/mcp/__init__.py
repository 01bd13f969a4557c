"""MCP tool servers as SEAL domains: ``sandboxed/seal_mcp_bridge.py`` runs the server in the sandbox,
``discovery`` checks its tools against the domain's spec."""
