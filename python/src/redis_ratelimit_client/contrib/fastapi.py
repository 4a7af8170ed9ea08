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
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import Request, Response
from starlette.exceptions import HTTPException
from starlette.responses import Response as StarletteResponse

from ..decision import Decision
from ..limiter import RateLimiter
from ._http import inputs_of, refusal


def limit(
    policy: str,
    *,
    key: Callable[[Any], str | Mapping[str, str] | None] | None = None,
    cost: int | Callable[[Any], int] = 1,
    limiter: RateLimiter | None = None,
    input_name: str | None = None,
) -> Callable[..., Any]:
    """A FastAPI dependency: ``Depends(limit("api", key=lambda request: ...))``.

    ``key(request)`` gives the policy's input (default: the client address), or ``None`` to
    let the request through unchecked (the dependency then gives ``None``). A refusal
    raises :class:`RateLimitExceeded` (``install(app, limiter)`` renders it as problem+json;
    without it FastAPI still answers 429 with the fields); an admitted response gets the
    fields. The limiter is ``limiter`` or the one :func:`install` put on ``app.state``.
    In-flight slots are released when the request is done.
    """

    async def dependency(request: Request, response: Response) -> Any:
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
        decision = await active.check(policy, units, inputs=inputs_of(value, name))
        if not decision.allowed:
            raise RateLimitExceeded(decision)
        if decision.wait_ms:
            await asyncio.sleep(decision.wait_ms / 1000)
        for field, text in decision.headers().items():
            response.headers[field] = text
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


def install(app: Any, limiter: RateLimiter) -> None:
    """Puts ``limiter`` on ``app.state`` and answers :class:`RateLimitExceeded` with the
    problem+json body."""
    app.state.ratelimiter = limiter

    async def handler(request: Request, error: Exception) -> StarletteResponse:
        assert isinstance(error, RateLimitExceeded)
        status, headers, body = refusal(error.decision)
        return StarletteResponse(body, status_code=status, headers=headers)

    app.add_exception_handler(RateLimitExceeded, handler)
