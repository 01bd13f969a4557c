"""Tool specs: JSON files describing a domain's tools, validated against SEAL's meta-schema.

A spec is data, not code: users add a domain by dropping a JSON file under ``tool_specs/<domain>/``.
Every file is checked with ``jsonschema`` at load, and a bad one fails with the file, the JSON path
and what is wrong, so the fix is obvious without reading our source.
"""

from seal_envs.spec.loader import (
    BUNDLED_SPECS,
    SpecError,
    ToolDomain,
    ToolSpec,
    available_domains,
    load_domain,
)

__all__ = ["BUNDLED_SPECS", "SpecError", "ToolDomain", "ToolSpec", "available_domains", "load_domain"]
