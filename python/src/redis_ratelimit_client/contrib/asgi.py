"""An ASGI middleware (Starlette, FastAPI, any ASGI app; no dependency).

```python
app.add_middleware(RateLimitMiddleware, limiter=limiter, policy="api",
                   key=lambda scope: header(scope, "x-api-key") or "anonymous",
                   routes={"/search": "search"}, exempt=["/healthz"])
```

A refused request is answered ``429`` (``503`` when the store is out of reach and the policy
fails closed) with ``Retry-After``, ``RateLimit-Policy``, ``RateLimit`` and a problem+json
body; admitted responses carry the fields too; in-flight slots are released when the
response has been sent; a paced request waits its turn first. With a FastAPI dependency's
policy (or a second middleware) on the same request, a request is admitted only if every
policy admits it: one refused later gets back what this one charged it (see
:mod:`redis_ratelimit_client.contrib._ledger`), and its refusal carries the refusing policy's
fields alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping

from ..decision import Decision
from ..errors import CheckError
from ..limiter import RateLimiter
from ._http import Check, exempted, inputs_of, internal_error, refusal, route_policy
from ._ledger import Spent, give_back_all_async, scope_ledger

#: ASGI's scope and messages: dicts of values of many types (the ASGI spec's), read here by
#: checking what they are.
Scope = MutableMapping[str, object]
Message = MutableMapping[str, object]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(scope: Scope, name: str) -> str | None:
    """A request header of an ASGI scope (case-insensitive)."""
    wanted = name.lower().encode()
    headers = scope.get("headers", ())
    for key, value in headers if isinstance(headers, Iterable) else ():
        if key.lower() == wanted:
            return bytes(value).decode("latin-1")
    return None


def client_ip(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if isinstance(client, (list, tuple)) and client else "anonymous"


def _encode(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.encode(), value.encode("latin-1")) for name, value in headers.items()]


async def send_refusal(send: Send, decision: Decision, *, legacy: bool = False) -> None:
    status, headers, body = refusal(decision, legacy=legacy)
    await send({"type": "http.response.start", "status": status, "headers": _encode(headers)})
    await send({"type": "http.response.body", "body": body})


class RateLimitMiddleware:
    """Checks every HTTP request: ``classify(scope)`` gives the :class:`Check` (or ``None``:
    unchecked); by default the policy is ``routes``' longest matching path prefix, else
    ``policy``, and its input ``input_name`` (``key``; a store-backed policy's tenant input)
    is ``key(scope)`` (default: the client address). ``exempt``: path prefixes or a
    predicate."""

    def __init__(
        self,
        app: ASGIApp,
        limiter: RateLimiter,
        *,
        policy: str | None = None,
        key: Callable[[Scope], str | Mapping[str, str] | None] = client_ip,
        routes: Mapping[str, str] | None = None,
        exempt: Iterable[str] | Callable[[str], bool] = (),
        classify: Callable[[Scope], Check | None] | None = None,
        cost: Callable[[Scope], int] | None = None,
        input_name: str | None = None,
        on_admitted: bool = True,
        legacy: bool = False,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.policy = policy
        self.key = key
        self.routes = dict(routes or {})
        self.exempt = exempt if callable(exempt) else tuple(exempt)
        self.classify = classify
        self.cost = cost
        self.input_name = input_name
        self.on_admitted = on_admitted
        self.legacy = legacy

    def _check(self, scope: Scope) -> Check | None:
        if self.classify is not None:
            return self.classify(scope)
        path = str(scope.get("path", ""))
        if exempted(path, self.exempt):
            return None
        policy = route_policy(path, self.routes, self.policy)
        if policy is None:
            return None
        value = self.key(scope)
        if value is None:
            return None
        definition = self.limiter.policy(policy)
        name = self.input_name or (definition.tenant_input if definition and definition.tenant_input else "key")
        return Check(policy, inputs_of(value, name), 1 if self.cost is None else self.cost(scope))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        check = self._check(scope)
        if check is None:
            await self.app(scope, receive, send)
            return
        ledger = scope_ledger(scope)
        try:
            decision = await self.limiter.check(check.policy, check.cost, inputs=check.inputs)
        except CheckError as error:
            await give_back_all_async(ledger)
            status, headers, body = internal_error(check.policy, error)
            await send({"type": "http.response.start", "status": status, "headers": _encode(headers)})
            await send({"type": "http.response.body", "body": body})
            return
        if not decision.allowed:
            await give_back_all_async(ledger)
            ledger.refused = decision
            await send_refusal(send, decision, legacy=self.legacy)
            return
        ledger.admitted(Spent(self.limiter, check.policy, dict(check.inputs), check.cost, decision))
        if decision.wait_ms:
            await asyncio.sleep(decision.wait_ms / 1000)
        fields = _encode(decision.headers(legacy=self.legacy)) if self.on_admitted else []

        async def send_with_fields(message: Message) -> None:
            # A policy checked later (a FastAPI dependency) that refused the request gave
            # back this one's charge: the refusal carries its own fields alone.
            if message["type"] == "http.response.start" and fields and ledger.refused is None:
                message = dict(message)
                headers = message.get("headers", [])
                message["headers"] = [*(headers if isinstance(headers, Iterable) else []), *fields]
            await send(message)

        try:
            await self.app(scope, receive, send_with_fields)
        finally:
            if decision.in_flight is not None:
                await self.limiter.release(decision)
