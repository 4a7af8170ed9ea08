"""What every HTTP adapter shares: choosing a policy and inputs for a request, and the
refusal a denied decision is answered with (429 or 503, ``Retry-After``, the IETF fields,
``application/problem+json``), exactly as the Rust client's tower layer answers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..decision import INTERNAL_ERROR_BODY, Decision

log = logging.getLogger("redis_ratelimit_client")

PROBLEM_JSON = "application/problem+json"


@dataclass(frozen=True, slots=True)
class Check:
    """What to check a request against: a policy, the inputs its keys need, a cost."""

    policy: str
    inputs: Mapping[str, str] = field(default_factory=dict)
    cost: int = 1


def inputs_of(value: object, input_name: str) -> dict[str, str]:
    """A key function's answer as inputs: a mapping of them, or the value of ``input_name``."""
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    return {input_name: str(value)}


def route_policy(path: str, routes: Mapping[str, str], default: str | None) -> str | None:
    """The policy of the longest route prefix matching ``path``, else ``default``."""
    best = None
    for prefix, policy in routes.items():
        matches = path == prefix or path.startswith(prefix.rstrip("/") + "/") or prefix == "/"
        if matches and (best is None or len(prefix) > len(best[0])):
            best = (prefix, policy)
    return default if best is None else best[1]


def exempted(path: str, exempt: Iterable[str] | Callable[[str], bool]) -> bool:
    if callable(exempt):
        return bool(exempt(path))
    return any(path == prefix or path.startswith(prefix.rstrip("/") + "/") for prefix in exempt)


def refusal(decision: Decision, *, legacy: bool = False) -> tuple[int, dict[str, str], bytes]:
    """The status, header fields and body of a refused request."""
    headers = decision.headers(legacy=legacy)
    headers["content-type"] = PROBLEM_JSON
    return decision.status, headers, decision.problem_json()


def internal_error(policy: str, error: Exception) -> tuple[int, dict[str, str], bytes]:
    """A check that could not be made is a bug of the service: 500, the detail in the log."""
    log.error("redis-ratelimit: a request for policy '%s' could not be checked (%s); answered 500", policy, error)
    return 500, {"content-type": PROBLEM_JSON}, INTERNAL_ERROR_BODY
