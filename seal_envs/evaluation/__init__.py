"""``seal-eval``: run a policy on a BFCL split through ``ToolUseEnv`` and report BFCL's table."""
