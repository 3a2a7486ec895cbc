"""What a gateway between draligned and the provider says about a call, read from its documented headers.

draligned archives the body it sent to its ``base_url``; a gateway (LiteLLM, OpenRouter, Portkey, an
ngrok AI gateway, ...) may then drop fields, retry upstream, or route an alias to a dated model. The
reply's HTTP headers are kept (secrets removed) and the documented ones are read into a
``GatewayInfo``: the served model, the upstream provider, the gateway's own retries and its cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draligned.records import GatewayInfo

#: Header names whose values are credentials or session state: kept as present, value removed.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie",
                            "set-cookie", "x-goog-api-key", "openai-organization", "openai-project"})
SECRET_WORDS = ("secret", "password", "auth", "session")
#: A name ending in one of these (``x-access-token``, ``x-portkey-api-key``) holds a credential;
#: ``x-ratelimit-remaining-tokens`` or ``x-litellm-key-spend`` do not.
SECRET_ENDINGS = ("-token", "-key", "-credential", "-credentials", "-signature")
#: A value in an authorization scheme is a credential whatever the header is called.
SECRET_SCHEMES = ("bearer ", "basic ", "token ")
REMOVED = "[removed]"


def is_secret(name: str, value: str) -> bool:
    """Whether a (lower-cased) header carries a credential, by its name or an authorization-scheme value."""
    return (name in SECRET_HEADERS or any(w in name for w in SECRET_WORDS) or name.endswith(SECRET_ENDINGS)
            or value.strip().lower().startswith(SECRET_SCHEMES))


def clean_headers(headers: Mapping[str, str], key: str | None) -> dict[str, str]:
    """Lower-cased headers with credential-bearing ones removed and the API key redacted anywhere."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        low = name.lower()
        secret = is_secret(low, value)
        out[low] = REMOVED if secret else (value.replace(key, "[redacted]") if key else value)
    return dict(sorted(out.items()))


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _int(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number >= 0 else None


def _split_provider(name: str | None) -> tuple[str | None, str | None]:
    """LiteLLM names a deployment ``provider/model``: (provider, model); a bare name has no provider."""
    if not name:
        return None, None
    provider, sep, model = name.partition("/")
    return (provider, model) if sep and model else (None, name)


def _litellm(h: Mapping[str, str]) -> GatewayInfo:
    provider, model = _split_provider(h.get("x-litellm-model-name"))
    base = h.get("x-litellm-model-api-base")
    upstream = " at ".join(x for x in (provider, base) if x) or None
    return GatewayInfo(gateway="litellm", served_model=model, upstream_provider=upstream,
                       retries=_int(h.get("x-litellm-attempted-retries")),
                       cost_usd=_number(h.get("x-litellm-response-cost")))


def _attempts_to_retries(value: Any) -> int | None:
    attempts = _int(value)
    return None if attempts is None else max(attempts - 1, 0)


def gateway_info(headers: Mapping[str, str], body: Mapping[str, Any]) -> GatewayInfo | None:
    """The gateway's report on a call from its documented headers (or, for OpenRouter, its body fields);
    None when no known gateway shows itself. ``headers`` are lower-cased."""
    names = list(headers)
    if any(n.startswith(("x-litellm-", "llm_provider-")) for n in names):
        return _litellm(headers)
    if any(n.startswith("ngrok-aig-") for n in names):
        return GatewayInfo(gateway="ngrok", served_model=headers.get("ngrok-aig-model"),
                           retries=_attempts_to_retries(headers.get("ngrok-aig-attempts")))
    if any(n.startswith("x-portkey-") for n in names):
        return GatewayInfo(gateway="portkey", upstream_provider=headers.get("x-portkey-provider"),
                           retries=_int(headers.get("x-portkey-retry-attempt-count")))
    provider = body.get("provider")
    if isinstance(provider, str) and str(body.get("id", "")).startswith("gen-"):  # OpenRouter's reply shape
        usage = body.get("usage")
        cost = _number(usage.get("cost")) if isinstance(usage, dict) else None
        model = body.get("model") if isinstance(body.get("model"), str) else None
        return GatewayInfo(gateway="openrouter", served_model=model, upstream_provider=provider, cost_usd=cost)
    return None
