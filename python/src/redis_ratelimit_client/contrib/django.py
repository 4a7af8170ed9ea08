"""Django: a middleware and a decorator that work on async and sync views alike.

```python
# settings.py
REDIS_RATELIMIT = {
    "LIMITER": lambda: SyncRateLimiter(redis.Redis.from_url(URL), POLICIES),        # sync views
    "ASYNC_LIMITER": lambda: RateLimiter(redis.asyncio.Redis.from_url(URL), POLICIES),  # async views
    "POLICY": "api",                      # the middleware's policy (optional)
    "KEY": "myapp.limits.api_key",        # request -> input value (default: REMOTE_ADDR)
    "ROUTES": {"/search/": "search"},     # path prefix -> policy
    "EXEMPT": ["/healthz"],
}
MIDDLEWARE = [..., "redis_ratelimit_client.contrib.django.RateLimitMiddleware"]

# views.py
@ratelimit("search", key=lambda request: request.user.username)
async def search(request): ...
```

``LIMITER`` and ``ASYNC_LIMITER`` are limiters or callables making one (an async limiter is
made once per event loop: a ``redis.asyncio`` client belongs to the loop it connected on).

A request is admitted only if the middleware's policy and every decorator's admit it: one a
view's policy refuses gets back what the middleware's policy charged it (see
:mod:`redis_ratelimit_client.contrib._ledger`), and its 429 carries the refusing policy's
fields alone; an admitted response carries every policy's.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TypeVar, cast

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from ..decision import Decision
from ..errors import CheckError
from ..limiter import RateLimiter, SyncRateLimiter
from ._http import exempted, inputs_of, internal_error, refusal, route_policy
from ._ledger import LIST_FIELDS, Ledger, Spent, give_back_async, give_back_sync

F = TypeVar("F", bound=Callable[..., object])
#: A key function: the request to its policy's input (a mapping of inputs, or the value of
#: the one input; ``None`` lets the request through unchecked).
KeyFunction = Callable[[HttpRequest], object]
#: The next layer of the stack: a response, or in async mode an awaitable of one.
GetResponse = Callable[[HttpRequest], "HttpResponse | Awaitable[HttpResponse]"]

#: The request attribute holding the checks it passed (:class:`~._ledger.Ledger`).
_LEDGER = "redis_ratelimit_ledger"

_lock = threading.Lock()
_sync: dict[str, SyncRateLimiter] = {}
_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RateLimiter] = weakref.WeakKeyDictionary()


def _config() -> Mapping[str, object]:
    config = getattr(settings, "REDIS_RATELIMIT", None)
    if not isinstance(config, Mapping):
        raise RuntimeError("settings.REDIS_RATELIMIT is missing: a dict with LIMITER and/or ASYNC_LIMITER")
    return config


def _made(value: object) -> object:
    if isinstance(value, str):
        value = import_string(value)
    return value() if callable(value) and not isinstance(value, (RateLimiter, SyncRateLimiter)) else value


def sync_limiter() -> SyncRateLimiter:
    """The limiter of sync views (settings' ``LIMITER``), made once."""
    with _lock:
        if "limiter" not in _sync:
            made = _made(_config().get("LIMITER"))
            if not isinstance(made, SyncRateLimiter):
                raise RuntimeError("settings.REDIS_RATELIMIT['LIMITER'] must be a SyncRateLimiter (or make one)")
            _sync["limiter"] = made
        return _sync["limiter"]


def async_limiter() -> RateLimiter:
    """The limiter of async views on the running loop (settings' ``ASYNC_LIMITER``)."""
    loop = asyncio.get_running_loop()
    with _lock:
        limiter = _async.get(loop)
        if limiter is None:
            made = _made(_config().get("ASYNC_LIMITER"))
            if not isinstance(made, RateLimiter):
                raise RuntimeError("settings.REDIS_RATELIMIT['ASYNC_LIMITER'] must be a RateLimiter (or make one)")
            limiter = _async[loop] = made
        return limiter


def reset() -> None:
    """Forgets the limiters made from the settings (tests that change them)."""
    with _lock:
        for limiter in _sync.values():
            limiter.close()
        _sync.clear()
        _async.clear()


def _remote(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "anonymous")


def _key_function(value: object) -> KeyFunction:
    if value is None:
        return _remote
    if isinstance(value, str):
        loaded: KeyFunction = import_string(value)
        return loaded
    if not callable(value):
        raise RuntimeError("settings.REDIS_RATELIMIT['KEY'] is a callable or its dotted path")
    return cast(KeyFunction, value)


def _response(status: int, headers: dict[str, str], body: bytes) -> HttpResponse:
    return HttpResponse(body, status=status, headers=headers)


def _input_name(limiter: RateLimiter | SyncRateLimiter, policy: str) -> str:
    definition = limiter.policy(policy)
    return definition.tenant_input if definition and definition.tenant_input else "key"


def _ledger(request: HttpRequest) -> Ledger:
    """The checks this request passed (the middleware's and the decorators')."""
    ledger: Ledger | None = getattr(request, _LEDGER, None)
    if ledger is None:
        ledger = Ledger()
        setattr(request, _LEDGER, ledger)
    return ledger


def _decorated(response: HttpResponse, request: HttpRequest, decision: Decision) -> HttpResponse:
    """Adds an admitted check's fields (to the list fields' items already there); a request
    a policy refused carries the refusing decision's fields alone."""
    if _ledger(request).refused is not None:
        return response
    for name, value in decision.headers().items():
        existing = response.get(name)
        response[name] = f"{existing}, {value}" if existing and name in LIST_FIELDS else value
    return response


def _give_back_sync(ledger: Ledger) -> None:
    for spent in ledger.take():
        if isinstance(spent.limiter, SyncRateLimiter):
            give_back_sync(spent)
        else:
            async_to_sync(give_back_async)(spent)


async def _give_back_async(ledger: Ledger) -> None:
    for spent in ledger.take():
        if isinstance(spent.limiter, RateLimiter):
            await give_back_async(spent)
        else:
            await sync_to_async(give_back_sync)(spent)


def _checked_sync(
    request: HttpRequest, policy: str, value: object, cost: int
) -> tuple[Decision | None, HttpResponse | None]:
    """The check's decision, or the response refusing the request (after giving back what
    the policies checked before it charged)."""
    limiter = sync_limiter()
    ledger = _ledger(request)
    inputs: dict[str, str] = {}
    try:
        inputs = inputs_of(value, _input_name(limiter, policy))
        decision = limiter.check(policy, cost, inputs=inputs)
    except CheckError as error:
        _give_back_sync(ledger)
        return None, _response(*internal_error(policy, error))
    if not decision.allowed:
        _give_back_sync(ledger)
        ledger.refused = decision
        return decision, _response(*refusal(decision))
    ledger.admitted(Spent(limiter, policy, inputs, cost, decision))
    if decision.wait_ms:
        time.sleep(decision.wait_ms / 1000)
    return decision, None


async def _checked_async(
    request: HttpRequest, policy: str, value: object, cost: int
) -> tuple[Decision | None, HttpResponse | None]:
    limiter = async_limiter()
    ledger = _ledger(request)
    inputs: dict[str, str] = {}
    try:
        inputs = inputs_of(value, _input_name(limiter, policy))
        decision = await limiter.check(policy, cost, inputs=inputs)
    except CheckError as error:
        await _give_back_async(ledger)
        return None, _response(*internal_error(policy, error))
    if not decision.allowed:
        await _give_back_async(ledger)
        ledger.refused = decision
        return decision, _response(*refusal(decision))
    ledger.admitted(Spent(limiter, policy, inputs, cost, decision))
    if decision.wait_ms:
        await asyncio.sleep(decision.wait_ms / 1000)
    return decision, None


class RateLimitMiddleware:
    """Limits every request by ``ROUTES``' longest matching prefix, else ``POLICY``;
    sync-capable and async-capable (Django runs it in the mode of the stack)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        self.asynchronous = iscoroutinefunction(get_response)
        if self.asynchronous:
            markcoroutinefunction(self)
        config = _config()
        policy, routes, exempt = config.get("POLICY"), config.get("ROUTES", {}), config.get("EXEMPT", ())
        if policy is not None and not isinstance(policy, str):
            raise RuntimeError(f"settings.REDIS_RATELIMIT['POLICY'] is a policy name (got {policy!r})")
        if not isinstance(routes, Mapping):
            raise RuntimeError(f"settings.REDIS_RATELIMIT['ROUTES'] maps path prefixes to policies (got {routes!r})")
        if isinstance(exempt, str) or not isinstance(exempt, Iterable):
            raise RuntimeError(f"settings.REDIS_RATELIMIT['EXEMPT'] is a list of path prefixes (got {exempt!r})")
        self.policy: str | None = policy
        self.routes = {str(prefix): str(name) for prefix, name in routes.items()}
        self.exempt = tuple(str(prefix) for prefix in exempt)
        self.key = _key_function(config.get("KEY"))

    def _plan(self, request: HttpRequest) -> tuple[str, object] | None:
        if exempted(request.path, self.exempt):
            return None
        policy = route_policy(request.path, self.routes, self.policy)
        if policy is None:
            return None
        value = self.key(request)
        return None if value is None else (policy, value)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if self.asynchronous:
            return self.__acall__(request)
        plan = self._plan(request)
        if plan is None:
            return self.get_response(request)
        decision, refused = _checked_sync(request, plan[0], plan[1], 1)
        if refused is not None or decision is None:
            return refused
        try:
            return _decorated(self.get_response(request), request, decision)
        finally:
            if decision.in_flight is not None:
                sync_limiter().release(decision)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        plan = self._plan(request)
        if plan is None:
            return await self.get_response(request)
        decision, refused = await _checked_async(request, plan[0], plan[1], 1)
        if refused is not None or decision is None:
            return refused
        try:
            return _decorated(await self.get_response(request), request, decision)
        finally:
            if decision.in_flight is not None:
                await async_limiter().release(decision)


def ratelimit(
    policy: str,
    *,
    key: KeyFunction | None = None,
    cost: int | Callable[[HttpRequest], int] = 1,
) -> Callable[[F], F]:
    """Limits one view, ``def`` or ``async def``, by ``policy`` for ``key(request)``
    (``None``: the request goes through unchecked)."""

    def decorate(view: F) -> F:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def asynchronous(request: HttpRequest, *args: object, **kwargs: object) -> object:
                value = (key or _key_function(_config().get("KEY")))(request)
                if value is None:  # let through unchecked, as the middleware does
                    return await view(request, *args, **kwargs)
                units = cost(request) if callable(cost) else cost
                decision, refused = await _checked_async(request, policy, value, units)
                if refused is not None or decision is None:
                    return refused
                try:
                    return _decorated(await view(request, *args, **kwargs), request, decision)
                finally:
                    if decision.in_flight is not None:
                        await async_limiter().release(decision)

            return asynchronous  # type: ignore[return-value]

        @functools.wraps(view)
        def synchronous(request: HttpRequest, *args: object, **kwargs: object) -> object:
            value = (key or _key_function(_config().get("KEY")))(request)
            if value is None:  # let through unchecked, as the middleware does
                return view(request, *args, **kwargs)
            units = cost(request) if callable(cost) else cost
            decision, refused = _checked_sync(request, policy, value, units)
            if refused is not None or decision is None:
                return refused
            try:
                return _decorated(view(request, *args, **kwargs), request, decision)
            finally:
                if decision.in_flight is not None:
                    sync_limiter().release(decision)

        return synchronous  # type: ignore[return-value]

    return decorate
