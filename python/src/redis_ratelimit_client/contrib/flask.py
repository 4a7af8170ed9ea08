"""A Flask extension (on the sync limiter) with a decorator.

```python
ratelimit = RateLimit(app, SyncRateLimiter(redis.Redis(), policies), default="api",
                      key=lambda request: request.headers.get("x-api-key", "anonymous"))

@app.get("/search")
@ratelimit.limit("search", key=lambda request: request.args.get("tenant", "-"))
def search(): ...

@app.get("/healthz")
@ratelimit.exempt
def healthz(): ...
```

``default`` limits every request (``routes``: path prefix -> policy, ``exempt``: prefixes);
``limit`` adds a view's own policy. A request is admitted only if every policy admits it: one
refused by the view's policy gets back what the default policy charged it (see
:mod:`redis_ratelimit_client.contrib._ledger`). Refusals are 429 (503 when failing closed)
with ``Retry-After``, the refusing policy's IETF fields and problem+json; admitted responses
get every policy's fields; in-flight slots are released when the request ends.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import flask

from ..errors import CheckError
from ..limiter import SyncRateLimiter
from ._http import exempted, inputs_of, internal_error, refusal, route_policy
from ._ledger import Ledger, Spent, admitted_fields, give_back_all_sync

F = TypeVar("F", bound=Callable[..., object])

_EXEMPT = "_redis_ratelimit_exempt"


def _remote(request: flask.Request) -> str:
    return request.remote_addr or "anonymous"


class RateLimit:
    def __init__(
        self,
        app: flask.Flask | None = None,
        limiter: SyncRateLimiter | None = None,
        *,
        default: str | None = None,
        key: Callable[[flask.Request], str | Mapping[str, str] | None] = _remote,
        routes: Mapping[str, str] | None = None,
        exempt: Iterable[str] = (),
        legacy: bool = False,
    ) -> None:
        self.limiter = limiter
        self.default = default
        self.key = key
        self.routes = dict(routes or {})
        self.exempt_paths = tuple(exempt)
        self.legacy = legacy
        if app is not None:
            self.init_app(app, limiter)

    def init_app(self, app: flask.Flask, limiter: SyncRateLimiter | None = None) -> None:
        if limiter is not None:
            self.limiter = limiter
        if self.limiter is None:
            raise RuntimeError("RateLimit needs a SyncRateLimiter: RateLimit(app, limiter) or init_app(app, limiter)")
        app.extensions["redis_ratelimit_client"] = self
        app.before_request(self._before)
        app.after_request(self._after)
        app.teardown_request(self._teardown)

    def _input_name(self, policy: str) -> str:
        assert self.limiter is not None
        definition = self.limiter.policy(policy)
        return definition.tenant_input if definition and definition.tenant_input else "key"

    @staticmethod
    def _ledger() -> Ledger:
        ledger: Ledger = flask.g.setdefault("ratelimit_ledger", Ledger())
        return ledger

    def _check(self, policy: str, value: str | Mapping[str, str], cost: int) -> flask.Response | None:
        """Checks the request; a refusal (or a misconfiguration) as the response to send,
        after giving back what the policies checked before it charged."""
        assert self.limiter is not None
        ledger = self._ledger()
        inputs: dict[str, str] = {}
        try:
            inputs = inputs_of(value, self._input_name(policy))
            decision = self.limiter.check(policy, cost, inputs=inputs)
        except CheckError as error:
            give_back_all_sync(ledger)
            return self._response(*internal_error(policy, error))
        if not decision.allowed:
            give_back_all_sync(ledger)
            ledger.refused = decision
            return self._response(*refusal(decision, legacy=self.legacy))
        ledger.admitted(Spent(self.limiter, policy, inputs, cost, decision))
        if decision.wait_ms:
            time.sleep(decision.wait_ms / 1000)
        return None

    @staticmethod
    def _response(status: int, headers: dict[str, str], body: bytes) -> flask.Response:
        return flask.Response(body, status=status, headers=headers)

    def _before(self) -> flask.Response | None:
        request = flask.request
        view = flask.current_app.view_functions.get(request.endpoint or "")
        if view is not None and getattr(view, _EXEMPT, False):
            return None
        if exempted(request.path, self.exempt_paths):
            return None
        policy = route_policy(request.path, self.routes, self.default)
        if policy is None:
            return None
        value = self.key(request)
        if value is None:
            return None
        return self._check(policy, value, 1)

    def _after(self, response: flask.Response) -> flask.Response:
        ledger: Ledger | None = flask.g.get("ratelimit_ledger")
        if ledger is None or ledger.refused is not None:
            return response
        for name, value in admitted_fields(ledger.decisions(), legacy=self.legacy).items():
            response.headers[name] = value
        return response

    def _teardown(self, error: BaseException | None) -> None:
        assert self.limiter is not None
        ledger: Ledger | None = flask.g.pop("ratelimit_ledger", None)
        for spent in [] if ledger is None else ledger.take():
            if spent.decision.in_flight is not None:
                self.limiter.release(spent.decision)

    def limit(
        self,
        policy: str,
        *,
        key: Callable[[flask.Request], str | Mapping[str, str] | None] | None = None,
        cost: int | Callable[[flask.Request], int] = 1,
    ) -> Callable[[F], F]:
        """Decorates a view with its own policy (checked after the default one)."""

        def decorate(view: F) -> F:
            @functools.wraps(view)
            def wrapped(*args: object, **kwargs: object) -> object:
                request = flask.request
                value = (key or self.key)(request)
                if value is not None:
                    units = cost(request) if callable(cost) else cost
                    refused = self._check(policy, value, units)
                    if refused is not None:
                        return refused
                return view(*args, **kwargs)

            return wrapped  # type: ignore[return-value]

        return decorate

    @staticmethod
    def exempt(view: F) -> F:
        """Exempts a view from the default policy."""
        setattr(view, _EXEMPT, True)
        return view
