"""Resolve a domain's tool implementations (module, class, method) before any episode runs.

A typo in ``"shop_api:ShopAPI.serch"`` or a missing module must fail where the domain is loaded, with the file
and the JSON path, not as a ``task_error`` at the first ``reset``. Tool code is untrusted and runs only inside
the sandbox (``docs/SANDBOX.md``), so the modules are imported there, by the sandbox's ``resolve`` request,
never in the host process (except with the in-process debug backend, which has no isolation at all).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from seal_envs.mcp.discovery import mcp_tool_problems
from seal_envs.sandbox import SandboxConfig, SandboxError, get_pool
from seal_envs.spec.loader import DOMAIN_FILE, SpecError, ToolDomain

_cache: dict[tuple, dict[str, str]] = {}
_cache_lock = threading.Lock()


class UnresolvedImplementations(ValueError):
    """Tool implementations that name a module, class or method that does not exist."""

    def __init__(self, problems: Sequence[SpecError]):
        self.problems = tuple(problems)
        super().__init__(f"{len(self.problems)} tool implementation(s) do not resolve; fix them (`seal-envs validate "
                         "DOMAIN` checks the whole domain):\n" + "\n".join(str(p) for p in self.problems))


def resolve_targets(targets: Sequence[str], python_paths: Sequence[str], code: str,
                    config: SandboxConfig) -> dict[str, str]:
    """target -> what is missing, found in a sandbox of ``config``; cached per process, backend and domain code
    (``code``: the domains' ``code_hash``, so edited code is resolved again). Raises ``SandboxError`` when no
    sandbox answers (an infrastructure fault, not the domain's)."""
    key = (config.backend, config.image, code, tuple(python_paths), tuple(sorted(set(targets))))
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    pool = get_pool(config)
    sandbox = pool.acquire()
    try:
        problems = sandbox.resolve(sorted(set(targets)), list(python_paths), code)
    except SandboxError:
        pool.discard(sandbox)
        raise
    except ValueError as exc:  # importing the domain's code hung or killed its process: every target is unusable
        pool.release(sandbox)  # not cached: a slow import under load may succeed the next time
        return {target: str(exc) for target in targets}
    pool.release(sandbox)
    with _cache_lock:
        _cache[key] = problems
    return problems


def implementation_problems(domains: Sequence[ToolDomain], config: SandboxConfig, python_paths: Sequence[str],
                            code: str) -> list[SpecError]:
    """Every tool whose ``implementation`` does not resolve, as ``tools.json: at $.tools[i].implementation: ...``;
    for an MCP domain, what is wrong with its server's tools (``seal_envs.mcp.discovery``)."""
    problems = resolve_targets([t.implementation for d in domains for t in d.tools], python_paths, code, config)
    return [SpecError(d.root / DOMAIN_FILE, f"$.tools[{i}].implementation", f"{t.implementation!r}: "
                      f"{problems[t.implementation]}")
            for d in domains for i, t in enumerate(d.tools) if t.implementation in problems] + [
        problem for d in domains if d.mcp is not None
        for problem in mcp_tool_problems(d, config, tuple(python_paths), code)]


def check_implementations(domains: Sequence[ToolDomain], config: SandboxConfig, python_paths: Sequence[str],
                          code: str) -> None:
    """Raise ``UnresolvedImplementations`` listing every tool whose implementation does not resolve."""
    problems = implementation_problems(domains, config, python_paths, code)
    if problems:
        raise UnresolvedImplementations(problems)
