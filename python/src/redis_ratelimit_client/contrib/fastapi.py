"""FastAPI: a dependency, ``Depends(limit("api", key=lambda request: ...))``, and
:func:`install`, which puts the limiter on ``app.state`` and renders refusals as
problem+json (the ASGI middleware, :mod:`redis_ratelimit_client.contrib.asgi`, limits whole apps).

```python
limiter = RateLimiter(Redis(), [Policy("api", [Limit.token_bucket("per-key", 100, refill=60, key="rl:{{{key}}}")])])
app = FastAPI()
install(app, limiter)

@app.get("/items", dependencies=[Depends(limit("api", key=lambda r: r.headers.get("x-api-key", "anonymous")))])
async def items() -> list[str]:
    return []
```
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

from fastapi import Request, Response
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import Response as StarletteResponse

from ..decision import Decision
from ..errors import CheckError
from ..limiter import RateLimiter
from ._http import inputs_of, refusal
from ._ledger import LIST_FIELDS, Spent, give_back_all_async, scope_ledger


def limit(
    policy: str,
    *,
    key: Callable[[Request], str | Mapping[str, str] | None] | None = None,
    cost: int | Callable[[Request], int] = 1,
    limiter: RateLimiter | None = None,
    input_name: str | None = None,
) -> Callable[[Request, Response], AsyncIterator[Decision | None]]:
    """A FastAPI dependency: ``Depends(limit("api", key=lambda request: ...))``.

    ``key(request)`` gives the policy's input (default: the client address), or ``None`` to
    let the request through unchecked (the dependency then gives ``None``). A refusal
    raises :class:`RateLimitExceeded` (``install(app, limiter)`` renders it as problem+json;
    without it FastAPI still answers 429 with the fields); an admitted response gets the
    fields. The limiter is ``limiter`` or the one :func:`install` put on ``app.state``.
    In-flight slots are released when the request is done. Behind the ASGI middleware (or
    beside other ``limit`` dependencies), a request is admitted only if every policy admits
    it: a refusal gives back what the policies checked before it charged.
    """

    async def dependency(request: Request, response: Response) -> AsyncIterator[Decision | None]:
        active = limiter or getattr(request.app.state, "ratelimiter", None)
        if active is None:
            raise RuntimeError("no rate limiter: pass limit(..., limiter=...) or call install(app, limiter)")
        value = key(request) if key is not None else (request.client.host if request.client else "anonymous")
        if value is None:  # the key function lets the request through unchecked, as in every adapter
            yield None
            return
        definition = active.policy(policy)
        name = input_name or (definition.tenant_input if definition and definition.tenant_input else "key")
        units = cost(request) if callable(cost) else cost
        inputs = inputs_of(value, name)
        ledger = scope_ledger(request.scope)
        try:
            decision = await active.check(policy, units, inputs=inputs)
        except CheckError:
            await give_back_all_async(ledger)
            raise
        if not decision.allowed:
            await give_back_all_async(ledger)
            ledger.refused = decision
            raise RateLimitExceeded(decision)
        ledger.admitted(Spent(active, policy, inputs, units, decision))
        if decision.wait_ms:
            await asyncio.sleep(decision.wait_ms / 1000)
        for field, text in decision.headers().items():
            existing = response.headers.get(field)
            response.headers[field] = f"{existing}, {text}" if existing and field in LIST_FIELDS else text
        try:
            yield decision
        finally:
            if decision.in_flight is not None:
                await active.release(decision)

    return dependency


class RateLimitExceeded(HTTPException):
    """A refusal raised by the FastAPI dependency: status 429 (or 503) with the fields."""

    def __init__(self, decision: Decision) -> None:
        status, headers, _ = refusal(decision)
        headers.pop("content-type", None)
        super().__init__(status_code=status, detail=decision.problem()["detail"], headers=headers)
        self.decision = decision


def install(app: Starlette, limiter: RateLimiter) -> None:
    """Puts ``limiter`` on ``app.state`` and answers :class:`RateLimitExceeded` with the
    problem+json body."""
    app.state.ratelimiter = limiter

    async def handler(request: Request, error: Exception) -> StarletteResponse:
        assert isinstance(error, RateLimitExceeded)
        status, headers, body = refusal(error.decision)
        return StarletteResponse(body, status_code=status, headers=headers)

    app.add_exception_handler(RateLimitExceeded, handler)
