"""What a check answers, and the HTTP fields a decision is sent as (the Rust client's
``decision.rs`` and ``http/headers.rs``: ``RateLimit-Policy`` / ``RateLimit`` of
draft-ietf-httpapi-ratelimit-headers-11, ``Retry-After``, the problem+json body)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, TypedDict

from ._kinds import CONCURRENCY, SLIDING_LOG, SLIDING_WINDOW
from .algorithms import Shape
from .replies import BackendName, View

if TYPE_CHECKING:
    from .policy import Policy

#: Where a decision came from: a store call, units leased earlier, a store denial
#: remembered, or the fallback.
Source: TypeAlias = Literal["store", "lease", "cache", "fallback"]
STORE: Final = "store"
LEASE: Final = "lease"
CACHE: Final = "cache"
FALLBACK: Final = "fallback"
#: How a decision is counted in the metrics (``ratelimit_decisions_total``'s ``outcome``).
Outcome: TypeAlias = Literal["allowed", "denied", "fallback_allowed", "fallback_denied", "error"]
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
TEMPORARY_REDUCED_CAPACITY = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"


class ProblemBody(TypedDict):
    """The ``application/problem+json`` body of a 503 (RFC 9457's members)."""

    type: str
    title: str
    status: int
    detail: str


#: The body of a 429: a :class:`ProblemBody` with the limits the request violated.
QuotaProblemBody = TypedDict(
    "QuotaProblemBody",
    {"type": str, "title": str, "status": int, "detail": str, "violated-policies": list[str]},
)


@dataclass(slots=True)
class LimitStatus:
    """One limit's state as a decision saw it: what the ``RateLimit`` field reports."""

    name: str
    #: The quota enforced for this decision (during a local fallback, this replica's share).
    quota: int
    #: The quota as configured (what ``RateLimit-Policy`` shows).
    configured_quota: int
    #: The window the quota applies to, in ns (a bucket's time to refill; 0 in-flight).
    window_ns: int
    in_flight: bool
    allowed: bool
    remaining: int
    retry_after_ms: int | None
    reset_after_ms: int
    #: When at least one more unit than ``remaining`` is available, in ns.
    more_in_ns: int

    @staticmethod
    def from_view(name: str, shape: Shape, view: View) -> LimitStatus:
        if not view.allowed and shape.kind in (SLIDING_WINDOW, SLIDING_LOG):
            # A denied sliding window's wait is exact, its reset only an upper bound.
            more_ms = view.reset_after_ms if view.retry_after_ms is None else view.retry_after_ms
            more_in = more_ms * 1_000_000
        else:
            more_in = shape.more_in_ns(view.remaining, view.reset_after_ms)
        return LimitStatus(
            name=name,
            quota=view.limit,
            configured_quota=view.limit,
            window_ns=shape.window_ns(),
            in_flight=shape.kind == CONCURRENCY,
            allowed=view.allowed,
            remaining=view.remaining,
            retry_after_ms=view.retry_after_ms,
            reset_after_ms=view.reset_after_ms,
            more_in_ns=more_in,
        )


def ceil_seconds_ns(ns: int) -> int:
    return -(-ns // 1_000_000_000)


@dataclass(slots=True)
class InFlight:
    """The in-flight slots an admitted request holds, to give back when it ends."""

    policy: str
    holder: str
    keys: tuple[str, ...]
    local: bool


@dataclass(slots=True)
class Decision:
    """The answer to a check.

    ``allowed``; ``remaining``, ``reset_after_ms`` and ``limit`` of the binding limit (the
    one that denied with the longest wait, or when admitted the one closest to running out);
    ``retry_after_ms`` (0 when admitted, ``None`` when the request can never pass);
    ``binding`` the binding limit's name; ``source`` ``store``, ``lease``, ``cache`` or
    ``fallback``; ``backend`` ``module``, ``functions``, ``scripts`` or ``memory`` (``None``
    for the fallback); ``wait_ms`` for a paced request, the wait before it proceeds.
    """

    allowed: bool
    policy: str
    source: Source
    backend: BackendName | None
    #: ``allowed``, ``denied``, ``fallback_allowed``, ``fallback_denied``, ``error``.
    outcome: Outcome
    retry_after_ms: int | None
    limits: list[LimitStatus] = field(default_factory=list)
    binding_index: int = 0
    wait_ms: int = 0
    in_flight: InFlight | None = None
    #: The policy definition (for ``RateLimit-Policy`` when no limit was consulted).
    definition: Policy | None = field(default=None, repr=False)

    @property
    def binding_limit(self) -> LimitStatus | None:
        return self.limits[self.binding_index] if self.binding_index < len(self.limits) else None

    @property
    def binding(self) -> str | None:
        limit = self.binding_limit
        return None if limit is None else limit.name

    @property
    def remaining(self) -> int:
        limit = self.binding_limit
        return 0 if limit is None else limit.remaining

    @property
    def reset_after_ms(self) -> int:
        limit = self.binding_limit
        return 0 if limit is None else limit.reset_after_ms

    @property
    def limit(self) -> int:
        limit = self.binding_limit
        return 0 if limit is None else limit.quota

    def violated(self) -> list[str]:
        return [limit.name for limit in self.limits if not limit.allowed]

    def __bool__(self) -> bool:
        return self.allowed

    # HTTP.

    @property
    def status(self) -> int:
        """What to answer: 200, 429, or 503 when the store is out of reach and the policy
        fails closed (no quota was consulted)."""
        if self.allowed:
            return 200
        if self.source == FALLBACK and not self.limits and self._fails_closed():
            return 503
        return 429

    def _fails_closed(self) -> bool:
        return self.definition is not None and self.definition.fallback.value == "closed"

    def retry_after_seconds(self) -> int | None:
        """``Retry-After``: seconds rounded up, at least 1; ``None`` when admitted or hopeless."""
        if self.allowed or self.retry_after_ms is None:
            return None
        return max(-(-self.retry_after_ms // 1000), 1)

    def policy_field(self) -> str | None:
        """``RateLimit-Policy``: the quotas as configured, stable whatever decided."""
        items = []
        if not self.limits:
            if self.definition is None:
                return None
            for limit in self.definition.limits:
                algorithm = limit.algorithm
                items.append(_policy_item(limit.name, algorithm.quota, algorithm.in_flight, algorithm.window_ns()))
        else:
            for status in self.limits:
                items.append(_policy_item(status.name, status.configured_quota, status.in_flight, status.window_ns))
        return ", ".join(items) or None

    def service_field(self) -> str | None:
        """``RateLimit``: each consulted limit's remaining units and effective window."""
        items = []
        for status in self.limits:
            item = f'"{status.name}";r={status.remaining}'
            if not status.in_flight:
                item += f";t={ceil_seconds_ns(status.more_in_ns)}"
            items.append(item)
        return ", ".join(items) or None

    def headers(self, *, on_admitted: bool = True, legacy: bool = False) -> dict[str, str]:
        """The response header fields, exactly as the Rust client writes them (lower case)."""
        headers: dict[str, str] = {}
        if self.allowed and not on_admitted:
            return headers
        retry = self.retry_after_seconds()
        if self.status == 503:
            if retry is not None:
                headers["retry-after"] = str(retry)
            return headers
        policy = self.policy_field()
        if policy is not None:
            headers["ratelimit-policy"] = policy
        service = self.service_field()
        if service is not None:
            headers["ratelimit"] = service
        if retry is not None:
            headers["retry-after"] = str(retry)
        binding = self.binding_limit
        if legacy and binding is not None:
            headers["x-ratelimit-limit"] = str(binding.quota)
            headers["x-ratelimit-remaining"] = str(binding.remaining)
            headers["x-ratelimit-reset"] = str(-(-binding.reset_after_ms // 1000))
        return headers

    def problem(self) -> ProblemBody | QuotaProblemBody:
        """The ``application/problem+json`` body of a refusal."""
        status = self.status
        if status == 503:
            return {
                "type": TEMPORARY_REDUCED_CAPACITY,
                "title": "Service Unavailable",
                "status": 503,
                "detail": "The rate limiter cannot reach its store; try again later.",
            }
        violated = self.violated()
        retry = self.retry_after_seconds()
        if violated and retry is not None:
            detail = f"Limit '{violated[0]}' of policy '{self.policy}' is exhausted; retry in {retry} s."
        elif violated:
            detail = f"The request costs more than limit '{violated[0]}' of policy '{self.policy}' ever allows."
        else:
            detail = f"Policy '{self.policy}' refused the request."
        return {
            "type": QUOTA_EXCEEDED,
            "title": "Too Many Requests",
            "status": status,
            "detail": detail,
            "violated-policies": violated,
        }

    def problem_json(self) -> bytes:
        """The problem body as the Rust client serialises it (compact, in that key order)."""
        return json.dumps(self.problem(), separators=(",", ":")).encode()


def _policy_item(name: str, quota: int, in_flight: bool, window_ns: int) -> str:
    if in_flight:
        return f'"{name}";q={quota};qu="concurrent-requests"'
    return f'"{name}";q={quota};w={max(ceil_seconds_ns(window_ns), 1)}'


#: The body of a check that could not be made (a bug in the service's configuration).
INTERNAL_ERROR_BODY = (
    b'{"title":"Internal Server Error","status":500,'
    b'"detail":"The request could not be checked against its rate limit."}'
)
