"""All or nothing across the policies one request is checked against (an adapter's default
policy and a view's own): every admitted decision is written in the request's ledger, and
when a later policy refuses the request, what the earlier ones spent is given back (refunded
once, never resent; in-flight slots released) before the refusal is answered. So a refused
request spends nothing, and refusals by a view's policy never wear down the default one.

What is given back is what the store charged: a decision of the store or of a lease. A
decision of the fallback spent nothing on the store (``open``) or this replica's local share
(``local``, kept: the replica cannot tell the store it never charged): during an outage a
refused request may still spend the local share of the policies checked before the refusal.

The refusal carries the refusing decision's fields alone (``RateLimit``, ``RateLimit-Policy``
and ``Retry-After`` describe the same limit); an admitted response carries every policy's
(both fields are lists)."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field

from ..decision import LEASE, STORE, Decision
from ..limiter import RateLimiter, Reservation, SyncRateLimiter, SyncReservation

#: The fields whose values are lists: an admitted response joins every policy's items.
LIST_FIELDS = ("ratelimit-policy", "ratelimit")


@dataclass(slots=True)
class Spent:
    """One admitted check: what to give back if a later policy refuses the request."""

    limiter: RateLimiter | SyncRateLimiter
    policy: str
    inputs: dict[str, str]
    cost: int
    decision: Decision


@dataclass(slots=True)
class Ledger:
    """The checks one request passed so far, and the refusal that ended it (if any)."""

    spent: list[Spent] = field(default_factory=list)
    refused: Decision | None = None

    def admitted(self, spent: Spent) -> None:
        self.spent.append(spent)

    def take(self) -> list[Spent]:
        """Every admitted check, once: the ledger is empty afterwards."""
        taken, self.spent = self.spent, []
        return taken

    def decisions(self) -> list[Decision]:
        return [entry.decision for entry in self.spent]


def _charged_the_store(decision: Decision) -> bool:
    return decision.allowed and decision.source in (STORE, LEASE)


def give_back_sync(entry: Spent) -> None:
    """Refunds what an admitted check of a :class:`SyncRateLimiter` charged, and releases
    its in-flight slots."""
    limiter = entry.limiter
    if not isinstance(limiter, SyncRateLimiter):
        raise TypeError("give_back_sync takes a check of a SyncRateLimiter")
    if _charged_the_store(entry.decision):
        SyncReservation(limiter, entry.policy, entry.inputs, entry.cost, entry.decision).release()
    if entry.decision.in_flight is not None:
        limiter.release(entry.decision)


async def give_back_async(entry: Spent) -> None:
    """Refunds what an admitted check of a :class:`RateLimiter` charged, and releases its
    in-flight slots."""
    limiter = entry.limiter
    if not isinstance(limiter, RateLimiter):
        raise TypeError("give_back_async takes a check of a RateLimiter")
    if _charged_the_store(entry.decision):
        await Reservation(limiter, entry.policy, entry.inputs, entry.cost, entry.decision).release()
    if entry.decision.in_flight is not None:
        await limiter.release(entry.decision)


def give_back_all_sync(ledger: Ledger) -> None:
    """Gives back every admitted check of the ledger (of sync limiters), once."""
    for spent in ledger.take():
        give_back_sync(spent)


async def give_back_all_async(ledger: Ledger) -> None:
    """Gives back every admitted check of the ledger (of async limiters), once."""
    for spent in ledger.take():
        await give_back_async(spent)


def admitted_fields(decisions: list[Decision], *, legacy: bool = False) -> dict[str, str]:
    """The fields of an admitted response checked against several policies: the list fields
    joined in check order; the legacy ``X-RateLimit-*`` of the decision with the fewest
    units remaining."""
    fields: dict[str, str] = {}
    for decision in decisions:
        for name, value in decision.headers().items():
            if name in LIST_FIELDS and name in fields:
                fields[name] = f"{fields[name]}, {value}"
            else:
                fields[name] = value
    bound = [decision for decision in decisions if decision.binding_limit is not None]
    if legacy and bound:
        tightest = min(bound, key=lambda decision: decision.remaining)
        for name, value in tightest.headers(legacy=True).items():
            if name.startswith("x-ratelimit-"):
                fields[name] = value
    return fields


#: Where an ASGI request's ledger lives: its scope's ``state`` (Starlette's ``request.state``).
_SCOPE_KEY = "redis_ratelimit_ledger"


def scope_ledger(scope: MutableMapping[str, object]) -> Ledger:
    """The ledger of an ASGI request, shared by the middleware and the FastAPI dependency."""
    state = scope.setdefault("state", {})
    if not isinstance(state, MutableMapping):
        raise TypeError(f"the ASGI scope's state is not a mapping: {type(state).__name__}")
    ledger = state.get(_SCOPE_KEY)
    if not isinstance(ledger, Ledger):
        ledger = state[_SCOPE_KEY] = Ledger()
    return ledger
