"""The closed set of tool-error codes: what a tool reports when it returned an error to the agent.

The code is archived as ``ToolCallEvent.error`` (and the events table's ``error`` column); a member's
value is that exact text, so archives written before this type existed read the same.
"""

from __future__ import annotations

from enum import StrEnum


class ToolError(StrEnum):
    """Why a tool call returned an error text instead of a result."""

    UNKNOWN_TOOL = "unknown_tool"
    """The reply called a tool the context is not offered."""
    MALFORMED_ARGUMENTS = "malformed_arguments"
    """The arguments are not a JSON object."""
    INVALID_ARGUMENTS = "invalid_arguments"
    """The arguments do not match the tool's JSON Schema."""
    EMPTY_QUERY = "empty_query"
    """search was called with an empty query."""
    SEARCH_SPENT = "search_spent"
    """The search backend has ended (pool budget reached or a sampled stop)."""
    UNKNOWN_URL = "unknown_url"
    """read was called with a URL the backend has no page for."""
    EMPTY_COMMAND = "empty_command"
    """shell was called with an empty command."""
    TIMEOUT = "timeout"
    """The shell command ran past its timeout and was killed."""
    REFUSED = "refused"
    """A file tool refused the path or the operation (outside /workspace, read-only, missing, ...)."""
    EMPTY_FILE = "empty_file"
    """submit_file named an empty file; nothing was submitted."""
    OVER_QUOTA = "over_quota"
    """A shell command left the workspace holding more than its quota (``workspace_mb``)."""
