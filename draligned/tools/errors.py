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
    """The shell command ran past its timeout and was killed, or a web provider or page did not answer
    within its timeout after the bounded retries."""
    REFUSED = "refused"
    """A file tool refused the path or the operation (outside /workspace, read-only, missing, ...)."""
    EMPTY_FILE = "empty_file"
    """submit_file named an empty file; nothing was submitted."""
    OVER_QUOTA = "over_quota"
    """A shell command left the workspace holding more than its quota (``workspace_mb``)."""
    # web acquisition (search/read through a provider or the http reader)
    RATE_LIMITED = "rate_limited"
    """The provider kept answering 429 (Too Many Requests) after the bounded retries."""
    PROVIDER_ERROR = "provider_error"
    """The provider kept answering 5xx, or answered with an error status not named otherwise."""
    CONNECTION_ERROR = "connection_error"
    """The provider or page host could not be reached (refused, reset, DNS), after the bounded retries."""
    AUTH_FAILED = "auth_failed"
    """The provider refused the key (401/403)."""
    BAD_REQUEST = "bad_request"
    """The provider refused the request as malformed (400/422), e.g. a bad ``options`` value."""
    MALFORMED_REPLY = "malformed_reply"
    """The provider's reply is not the JSON it documents; its raw body is archived."""
    NOT_HTML = "not_html"
    """The page is neither HTML, plain text nor PDF (e.g. an image or a zip file)."""
    TOO_LARGE = "too_large"
    """The page is larger than the reader's size cap."""
    TOO_MANY_REDIRECTS = "too_many_redirects"
    """The page redirected more often than the reader allows (or in a loop)."""
    BLOCKED_ADDRESS = "blocked_address"
    """The URL resolves to a private, loopback or link-local address the study does not allow."""
    BAD_URL = "bad_url"
    """The URL is not an absolute http(s) URL."""
    HTTP_ERROR = "http_error"
    """The page answered with an HTTP error status other than 404/410."""
    HTTP_404 = "http_404"
    """The page does not exist (404 or 410)."""
    NO_TEXT = "no_text"
    """The page was fetched but has no extractable text."""
    NOT_IN_STORE = "not_in_store"
    """Read-only replay: the acquisition store has no entry for this request (no live call is made)."""
