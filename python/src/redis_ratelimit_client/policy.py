"""Policies: named sets of limits checked together, and what to do when the store is out of
reach (the Rust client's ``policy.rs``, same defaults and the same refusals)."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ._kinds import BY_NAME
from .algorithms import Algorithm, AlgorithmError, RateValue, Seconds, seconds_to_us
from .core.numbers import U64_MAX
from .keys import KeyTemplate, TemplateError

_NAME = re.compile(r"[A-Za-z0-9_.-]+")

#: Most limits in one policy: the most keys one ``RL.MULTI`` takes.
MAX_LIMITS = 16
#: Default store timeout, 50 ms: chosen from measurement by the Rust client (round trips
#: p99.7 10 ms, at most 25-50 ms under 16 connections on a loaded 2-vCPU machine).
DEFAULT_TIMEOUT = 0.05
#: Longest pacing wait (``MAXWAIT``): a day.
MAX_WAIT_MS = 86_400_000
#: The ``key_class`` label of a limit whose policy names no class (the Rust
#: ``DEFAULT_KEY_CLASS``).
DEFAULT_KEY_CLASS = "default"
#: The ``key_class`` of a limit a policy store's override sets (one tenant's, or a
#: wildcard's): no quota gauge is exported for it (it would be a series per tenant).
OVERRIDE_KEY_CLASS = "override"


class PolicyError(ValueError):
    """A policy or limit that cannot work."""


def check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PolicyError(f"bad {what} '{name}': use ASCII letters, digits, '_', '-' and '.'")
    return name


class Fallback(str, enum.Enum):
    """What a check does when the store cannot be reached in time."""

    #: Admit everything.
    OPEN = "open"
    #: Deny everything (HTTP adapters answer 503).
    CLOSED = "closed"
    #: Decide in process, each replica at ``quota / replicas``, continuing from the store's
    #: last answer and charged back to the store when it answers again.
    LOCAL = "local"


@dataclass(frozen=True, slots=True)
class Lease:
    """Claim ``units`` per store call (more for a hot key, up to ``max_units``, default
    4 × units) and spend them from memory for ``lifetime`` seconds (default 1).

    Bound: a unit claimed at one instant may be spent up to a lifetime later, so over any
    interval a key can exceed its allowance by at most the units outstanding in leases at the
    interval's start, ``replicas × max_units``.
    """

    units: int
    max_units: int | None = None
    lifetime: float = 1.0

    @property
    def cap(self) -> int:
        return self.units * 4 if self.max_units is None else self.max_units

    def claim_for(self, cost: int, waiting: int, recent: int) -> int:
        demand = cost * (waiting + 1)
        return max(min(max(demand, recent), self.cap), self.units, cost)


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit of a policy: an algorithm applied to the key a template renders.

    ``key_class`` names the class of the keys it renders (``ip``, ``tenant``, a plan's
    name...): the ``key_class`` label of its metrics, which say what kind of key was limited,
    never which one (``docs/operating.md``). Unset, its policy's, else ``default``."""

    name: str
    algorithm: Algorithm
    key: KeyTemplate
    weight: int = 1
    max_wait_ms: int | None = None
    key_class: str | None = None

    @property
    def class_label(self) -> str:
        """The class of its keys, as its metrics label them."""
        return DEFAULT_KEY_CLASS if self.key_class is None else self.key_class

    @staticmethod
    def of(
        name: str,
        algorithm: Algorithm,
        *,
        key: str,
        weight: int = 1,
        max_wait: Seconds | None = None,
        key_class: str | None = None,
    ) -> Limit:
        check_name(name, "limit name")
        if key_class is not None:
            check_name(key_class, f"key class of limit '{name}'")
        try:
            template = KeyTemplate(key)
        except TemplateError as error:
            raise PolicyError(f"limit '{name}': {error}") from None
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= U64_MAX:
            raise PolicyError(f"limit '{name}': the weight is a whole number from 1 to {U64_MAX} (got {weight!r})")
        wait_ms = None
        if max_wait is not None:
            if not BY_NAME[algorithm.kind].paced:
                raise PolicyError(f"limit '{name}': only token buckets can be paced")
            wait_us = seconds_to_us("max_wait", max_wait)
            if wait_us % 1_000 or wait_us < 0 or wait_us > MAX_WAIT_MS * 1_000:
                raise PolicyError(f"limit '{name}': the wait is whole milliseconds, at most a day")
            wait_ms = wait_us // 1_000
        return Limit(name, algorithm, template, weight, wait_ms, key_class)

    @staticmethod
    def _build(
        name: str,
        build: object,
        key: str,
        weight: int,
        max_wait: Seconds | None = None,
        key_class: str | None = None,
    ) -> Limit:
        assert callable(build)
        try:
            algorithm = build()
        except AlgorithmError as error:
            raise PolicyError(f"limit '{name}': {error}") from None
        return Limit.of(name, algorithm, key=key, weight=weight, max_wait=max_wait, key_class=key_class)

    @staticmethod
    def token_bucket(
        name: str,
        capacity: int,
        rate: RateValue | None = None,
        *,
        refill: Seconds | None = None,
        key: str,
        weight: int = 1,
        max_wait: Seconds | None = None,
        key_class: str | None = None,
    ) -> Limit:
        """``capacity`` tokens refilled at ``rate`` per second (or completely over ``refill``
        seconds). ``max_wait`` paces instead of refusing (the module's ``MAXWAIT``)."""
        return Limit._build(
            name, lambda: Algorithm.token_bucket(capacity, rate, refill=refill), key, weight, max_wait, key_class
        )

    @staticmethod
    def fixed_window(
        name: str, limit: int, window: Seconds, *, key: str, weight: int = 1, key_class: str | None = None
    ) -> Limit:
        return Limit._build(name, lambda: Algorithm.fixed_window(limit, window), key, weight, None, key_class)

    @staticmethod
    def sliding_window(
        name: str, limit: int, window: Seconds, *, key: str, weight: int = 1, key_class: str | None = None
    ) -> Limit:
        return Limit._build(name, lambda: Algorithm.sliding_window(limit, window), key, weight, None, key_class)

    @staticmethod
    def sliding_log(
        name: str, limit: int, window: Seconds, *, key: str, weight: int = 1, key_class: str | None = None
    ) -> Limit:
        return Limit._build(name, lambda: Algorithm.sliding_log(limit, window), key, weight, None, key_class)

    @staticmethod
    def gcra(
        name: str,
        max_burst: int,
        count: int,
        period: Seconds,
        *,
        key: str,
        weight: int = 1,
        key_class: str | None = None,
    ) -> Limit:
        return Limit._build(name, lambda: Algorithm.gcra(max_burst, count, period), key, weight, None, key_class)

    @staticmethod
    def concurrency(name: str, limit: int, ttl: Seconds, *, key: str, key_class: str | None = None) -> Limit:
        """At most ``limit`` requests in flight (released by the request, or after ``ttl``)."""
        return Limit._build(name, lambda: Algorithm.concurrency(limit, ttl), key, 1, None, key_class)


@dataclass(frozen=True, slots=True)
class Policy:
    """A named set of limits: a request is admitted only if every limit admits it, and then
    every limit is charged.

    ``tenant_input`` names the input holding the tenant whose limits come from the plans store
    (see ``Policy.from_store``); the limits given are then the defaults. ``key_class`` names
    the class of the keys of its limits that name none (:class:`Limit`'s ``key_class``).
    """

    name: str
    limits: tuple[Limit, ...]
    lease: Lease | None = None
    fallback: Fallback = Fallback.LOCAL
    timeout: float = DEFAULT_TIMEOUT
    deny_cache: bool = True
    tenant_input: str | None = None
    _inputs: tuple[str, ...] = field(default=(), repr=False, compare=False)
    _by_name: dict[str, int] = field(default_factory=dict, repr=False, compare=False, hash=False)

    def __init__(
        self,
        name: str,
        limits: Iterable[Limit],
        *,
        lease: Lease | None = None,
        fallback: Fallback | str = Fallback.LOCAL,
        timeout: float = DEFAULT_TIMEOUT,
        deny_cache: bool = True,
        tenant_input: str | None = None,
        key_class: str | None = None,
    ) -> None:
        check_name(name, "policy name")
        limits = tuple(limits)
        if key_class is not None:
            check_name(key_class, f"key class of policy '{name}'")
            limits = tuple(
                limit if limit.key_class is not None else dataclasses.replace(limit, key_class=key_class)
                for limit in limits
            )
        try:
            fallback = Fallback(fallback)
        except ValueError:
            raise PolicyError(f"policy '{name}': fallback is open, closed or local (got '{fallback}')") from None
        if not limits:
            raise PolicyError(f"policy '{name}' has no limits")
        if len(limits) > MAX_LIMITS:
            raise PolicyError(f"policy '{name}' has more than {MAX_LIMITS} limits (RL.MULTI's maximum)")
        for index, limit in enumerate(limits):
            earlier = limits[:index]
            if any(other.name == limit.name for other in earlier):
                raise PolicyError(f"policy '{name}': two limits are named '{limit.name}'")
            if any(other.key == limit.key for other in earlier):
                raise PolicyError(f"policy '{name}': two limits use the key '{limit.key}': a key holds one limiter")
        if not timeout > 0:
            raise PolicyError(f"policy '{name}': the store timeout must be above zero")
        if lease is not None:
            if lease.units < 1:
                raise PolicyError(f"policy '{name}': a lease of 0 units claims nothing: give at least 1 (or no lease)")
            if lease.cap < lease.units:
                raise PolicyError(
                    f"policy '{name}': the lease's max_units ({lease.cap}) is below its units ({lease.units})"
                )
            if not lease.lifetime > 0:
                raise PolicyError(f"policy '{name}': the lease lifetime must be above zero")
            for limit in limits:
                if limit.algorithm.in_flight:
                    raise PolicyError(
                        f"policy '{name}': limit '{limit.name}' is an in-flight limit: its policy cannot be leased"
                    )
                if limit.max_wait_ms is not None:
                    raise PolicyError(
                        f"policy '{name}': limit '{limit.name}': a paced limit cannot be leased "
                        "(the module refuses PARTIAL with MAXWAIT)"
                    )
        if tenant_input is not None and not re.fullmatch(r"[A-Za-z0-9_-]+", tenant_input):
            raise PolicyError(f"policy '{name}': bad tenant input name '{tenant_input}'")
        inputs: list[str] = []
        for limit in limits:
            for input_name in limit.key.inputs():
                if input_name not in inputs:
                    inputs.append(input_name)
        setter = object.__setattr__
        setter(self, "name", name)
        setter(self, "limits", limits)
        setter(self, "lease", lease)
        setter(self, "fallback", fallback)
        setter(self, "timeout", float(timeout))
        setter(self, "deny_cache", bool(deny_cache))
        setter(self, "tenant_input", tenant_input)
        setter(self, "_inputs", tuple(inputs) if tenant_input is None else (tenant_input,))
        setter(self, "_by_name", {limit.name: index for index, limit in enumerate(limits)})

    @staticmethod
    def from_store(
        name: str,
        tenant: str = "tenant",
        defaults: Sequence[Limit] = (),
        *,
        lease: Lease | None = None,
        fallback: Fallback | str = Fallback.LOCAL,
        timeout: float = DEFAULT_TIMEOUT,
        deny_cache: bool = True,
    ) -> Policy:
        """A policy whose limits come from the plans store (``rlctl``) for the tenant named
        by input ``tenant``; ``defaults`` apply to a tenant on no plan, and to everyone until
        the store has been read. Its keys are the store's (``rl:plan:{tenant}:...``), the same
        whatever plan sets a limit, so a change applies to the tenant's existing state."""
        return Policy(
            name,
            defaults,
            lease=lease,
            fallback=fallback,
            timeout=timeout,
            deny_cache=deny_cache,
            tenant_input=tenant,
        )

    @property
    def inputs(self) -> tuple[str, ...]:
        """The inputs a check must give (each once, in order of first use)."""
        return self._inputs

    def index_of(self, limit: str) -> int | None:
        """The place of the limit named ``limit`` among its limits."""
        return self._by_name.get(limit)

    @property
    def holds_slots(self) -> bool:
        return any(limit.algorithm.in_flight for limit in self.limits)
