"""Plans and per-tenant overrides from the policy store ``rlctl`` edits (the Rust client's
``plans/``): a policy built with ``Policy.from_store`` takes its limits, for the tenant a
check names, from one snapshot of the store, followed through its change notifications
(``{rl-policy}:changes``) and a version check every ``check_every`` (0.5 s) as the backstop.

Keys do not depend on the plan: limit ``per-minute`` of policy ``api`` for tenant ``acme`` is
always ``rl:plan:{acme}:api:per-minute:sliding``, so a change applies to the tenant's state
(nobody reset to full, nothing charged twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._kinds import BY_NAME, GCRA, KINDS, TOKEN_BUCKET, Kind
from .algorithms import Algorithm, AlgorithmError, or_list
from .clock import SYSTEM_CLOCK, Clock
from .metrics import Metrics, default_metrics
from .policy import DEFAULT_KEY_CLASS, OVERRIDE_KEY_CLASS, Limit, Policy, PolicyError, check_name
from .redis_boundary import AsyncClient, PubSub, SyncClient

log = logging.getLogger("redis_ratelimit_client")

VERSION_KEY = "{rl-policy}:version"
PLANS_KEY = "{rl-policy}:plans"
TENANTS_KEY = "{rl-policy}:tenants"
OVERRIDES_KEY = "{rl-policy}:overrides"
CHANNEL = "{rl-policy}:changes"
#: The kinds a plan's limit can be (the generated table, ``_kinds.py``).
_KINDS = tuple(kind.name for kind in KINDS if kind.in_plans)
_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: Most built policies kept (about as many as plans and overrides).
_MAX_POLICIES = 1024


def check_class(name: str) -> bool:
    """Whether ``name`` can label a key class (a limit name's characters)."""
    try:
        check_name(name)
    except PolicyError:
        return False
    return True


class SpecError(ValueError):
    """A text of the policy store that cannot be read."""


def parse_duration_ms(text: str) -> int:
    match = re.fullmatch(r"(\d+)(ms|s|m|h|d)", text)
    if match is None or int(match.group(1)) == 0:
        raise SpecError(f"bad duration '{text}': a whole number above zero then ms, s, m, h or d (60s, 7d)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def duration_text(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """One named limit: ``NAME=KIND:AMOUNT/PERIOD`` (``per-day=fixed:100000/1d``)."""

    name: str
    kind: Kind
    amount: int
    period_ms: int

    @staticmethod
    def parse(text: str) -> LimitSpec:
        match = re.fullmatch(r"([A-Za-z0-9_.-]{1,64})=([a-z]+):(\d+)/(\S+)", text)
        if match is None:
            raise SpecError(f"bad limit '{text}': write NAME=KIND:AMOUNT/PERIOD (per-minute=sliding:1000/60s)")
        name, kind_name, amount, period = match.groups()
        kind = BY_NAME.get(kind_name)
        if kind is None or not kind.in_plans:
            raise SpecError(f"bad limit '{text}': unknown algorithm '{kind_name}'")
        spec = LimitSpec(name, kind.name, int(amount), parse_duration_ms(period))
        try:
            spec.algorithm()
        except AlgorithmError as error:
            raise SpecError(f"bad limit '{text}': {error}") from None
        return spec

    def algorithm(self) -> Algorithm:
        seconds = f"{self.period_ms // 1000}.{self.period_ms % 1000:03d}"
        if self.kind == TOKEN_BUCKET:
            return Algorithm.token_bucket(self.amount, refill=seconds)
        if self.kind == GCRA:
            return Algorithm.gcra(max(self.amount - 1, 0), self.amount, seconds)
        return Algorithm.from_params(self.kind, [str(self.amount), seconds])

    @staticmethod
    def from_limit(limit: Limit) -> LimitSpec | None:
        """The plan limit a policy's default stands for (``None`` if it is not one)."""
        algorithm = limit.algorithm
        if limit.weight != 1 or limit.max_wait_ms is not None or algorithm.kind not in _KINDS:
            return None
        kind = algorithm.kind
        if kind == GCRA:
            amount, period_ns = algorithm.count, algorithm.period_s * 1_000_000_000
        elif kind == TOKEN_BUCKET:
            amount, period_ns = algorithm.quota, algorithm.window_ns()
        else:
            amount, period_ns = algorithm.quota, algorithm.window_us * 1_000
        if period_ns % 1_000_000:
            return None
        spec = LimitSpec(limit.name, kind, amount, period_ns // 1_000_000)
        try:
            return spec if spec.algorithm().shape() == algorithm.shape() else None
        except AlgorithmError:
            return None

    def __str__(self) -> str:
        return f"{self.name}={self.kind}:{self.amount}/{duration_text(self.period_ms)}"


@dataclass(frozen=True, slots=True)
class Override:
    pattern: str
    limit: str | None
    limits: tuple[LimitSpec, ...]
    expires_at_ms: int | None

    def live(self, now_ms: int) -> bool:
        return self.expires_at_ms is None or self.expires_at_ms > now_ms


def is_tenant(value: str) -> bool:
    """Whether the store would take ``value`` as a tenant id: 1 to 256 printable ASCII
    characters other than space, ``*``, ``{`` and ``}`` (the Rust ``check_tenant``)."""
    return 0 < len(value) <= 256 and all("!" <= c <= "~" and c not in "*{}" for c in value)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The policy store at one version."""

    version: int = 0
    plans: Mapping[str, tuple[LimitSpec, ...]] = dataclasses.field(default_factory=dict)
    tenants: Mapping[str, str] = dataclasses.field(default_factory=dict)
    overrides: Mapping[str, Override] = dataclasses.field(default_factory=dict)
    #: The overrides by pattern (``acme``, ``acme-*``), the whole-set one first, then by
    #: limit name; and the longest wildcard's prefix length (no longer prefix can match).
    _by_pattern: Mapping[str, tuple[Override, ...]] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _longest_prefix: int = dataclasses.field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        grouped: dict[str, list[Override]] = {}
        for entry in self.overrides.values():
            grouped.setdefault(entry.pattern, []).append(entry)
        by_pattern = {
            pattern: tuple(sorted(entries, key=lambda e: (e.limit is not None, e.limit or "")))
            for pattern, entries in grouped.items()
        }
        wildcards = [len(pattern) - 1 for pattern in by_pattern if pattern.endswith("*")]
        object.__setattr__(self, "_by_pattern", by_pattern)
        object.__setattr__(self, "_longest_prefix", max(wildcards, default=0))

    @staticmethod
    def decode(
        version: int, plans: Mapping[str, str], tenants: Mapping[str, str], overrides: Mapping[str, str]
    ) -> Snapshot:
        decoded_plans = {}
        for name, value in plans.items():
            specs = tuple(LimitSpec.parse(word) for word in value.split())
            if not specs:
                raise SpecError(f"plan '{name}' has no limits")
            decoded_plans[name] = specs
        decoded = {}
        for field, value in overrides.items():
            pattern, _, limit = field.partition(" ")
            expires = None
            specs_list = []
            for word in value.split():
                if word.startswith("expires="):
                    expires = int(word[len("expires=") :])
                else:
                    specs_list.append(LimitSpec.parse(word))
            decoded[field] = Override(pattern, limit or None, tuple(specs_list), expires)
        return Snapshot(version, decoded_plans, dict(tenants), decoded)

    def _entries(self, pattern: str, now_ms: int) -> list[Override]:
        """The live overrides of ``pattern``, found by key (never by a scan of them all)."""
        return [entry for entry in self._by_pattern.get(pattern, ()) if entry.live(now_ms)]

    def resolve(self, tenant: str, defaults: tuple[LimitSpec, ...], now_ms: int) -> tuple[LimitSpec, ...]:
        """The limits for ``tenant``: exact override > longest wildcard > plan > defaults
        (see :meth:`resolve_classed`)."""
        return tuple(spec for spec, _ in self.resolve_classed(tenant, defaults, now_ms))

    def resolve_classed(
        self, tenant: str, defaults: tuple[LimitSpec, ...], now_ms: int
    ) -> tuple[tuple[LimitSpec, str], ...]:
        """The limits for ``tenant``, each with the class its metrics label its key with
        (``key_class``): the tenant's plan, ``override`` when an override (exact or wildcard)
        set it, ``default`` when the policy's defaults apply; never the tenant.

        Exact override > longest wildcard > plan > defaults. A value the store would refuse
        as a tenant id (a space, ``*``, ``{``, ``}``, a control character, over 256
        characters) is no tenant: no plan and no exact override name it (else ``acme
        per-minute`` would find the field of acme's one-limit override); wildcard overrides
        apply to it by prefix, as to any value. Only prefixes up to the longest wildcard's are
        tried: a long value costs no more than a short one.
        """
        exact = tenant if is_tenant(tenant) else None
        plan = None if exact is None else self.tenants.get(exact)
        planned = None if plan is None else self.plans.get(plan)
        if plan is not None and planned is not None:
            specs = [(spec, plan) for spec in planned]
        else:
            specs = [(spec, DEFAULT_KEY_CLASS) for spec in defaults]
        wildcard = None
        for length in range(min(len(tenant), self._longest_prefix), -1, -1):
            text = tenant[:length] + "*"
            if self._entries(text, now_ms):
                wildcard = text
                break
        for pattern in (wildcard, exact):
            if pattern is None:
                continue
            for entry in self._entries(pattern, now_ms):
                if entry.limit is None:
                    specs = []
                for spec in entry.limits:
                    for index, (existing, _) in enumerate(specs):
                        if existing.name == spec.name:
                            specs[index] = (spec, OVERRIDE_KEY_CLASS)
                            break
                    else:
                        specs.append((spec, OVERRIDE_KEY_CLASS))
        return tuple(specs)


def key_template(tenant_input: str, policy: str, limit: str, kind: Kind) -> str:
    """The key of a store-backed policy's limit: one slot per tenant (the hash tag)."""
    return f"rl:plan:{{{{{{{tenant_input}}}}}}}:{policy}:{limit}:{kind}"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _integer(value: object) -> int:
    """A reply's integer (``GET`` of a missing key: 0)."""
    if value is None:
        return 0
    if isinstance(value, (int, str, bytes)) and not isinstance(value, bool):
        return int(value)
    raise ValueError(f"not an integer: {value!r}")


def _hash(value: object) -> dict[str, str]:
    """An ``HGETALL`` reply: a map (RESP3) or a flat list of fields and values."""
    if isinstance(value, dict):
        return {_text(k): _text(v) for k, v in value.items()}
    if value is None:
        return {}
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"not a hash: {value!r}")
    return {_text(value[i]): _text(value[i + 1]) for i in range(0, len(value) - 1, 2)}


@dataclass(frozen=True, slots=True)
class StoreReading:
    """One read of the policy store: the replies to :func:`_read_commands`, read."""

    version: int
    plans: dict[str, str]
    tenants: dict[str, str]
    overrides: dict[str, str]
    #: The server's clock (``TIME``), in Unix ms.
    server_ms: int
    #: The version read again last: a change came between the reads unless it is ``version``.
    version_after: int

    @staticmethod
    def of(replies: Sequence[object]) -> StoreReading:
        version, plans, tenants, overrides, server_time, version_after = replies
        if not isinstance(server_time, (list, tuple)) or len(server_time) != 2:
            raise ValueError(f"TIME: expected seconds and microseconds, got {server_time!r}")
        server_ms = _integer(server_time[0]) * 1000 + _integer(server_time[1]) // 1000
        return StoreReading(
            _integer(version), _hash(plans), _hash(tenants), _hash(overrides), server_ms, _integer(version_after)
        )


class _PlanSourceBase:
    def __init__(
        self,
        redis: AsyncClient | SyncClient,
        check_every: float,
        subscribe: bool,
        timeout: float,
        metrics: Metrics | None,
        clock: Clock,
    ) -> None:
        self.redis = redis
        self.check_every = check_every
        self.subscribe = subscribe
        self.timeout = timeout
        self.metrics = metrics or default_metrics()
        self.snapshot = Snapshot(0, {}, {}, {})
        self.loaded = False
        self.error = "not read yet"
        #: Where overrides' expiry is read (the wall clock, corrected by the server's).
        self._clock = clock
        self._offset_ms = 0
        # Built policies by limit set, the least recently used forgotten past _MAX_POLICIES.
        self._policies: OrderedDict[tuple[str, tuple[tuple[LimitSpec, str], ...]], Policy] = OrderedDict()
        self._defaults: dict[str, tuple[LimitSpec, ...]] = {}

    @property
    def status(self) -> str:
        if self.loaded:
            return f"policy store at version {self.snapshot.version}"
        return f"policy store not read yet ({self.error}): the policies' defaults apply"

    @property
    def version(self) -> int:
        return self.snapshot.version

    def now_ms(self) -> int:
        """The server's clock now, in Unix ms (this process's wall clock, corrected by the
        offset the last read measured)."""
        return self._clock.wall_ms() + self._offset_ms

    def _apply(self, replies: Sequence[object], before_ms: int, after_ms: int) -> None:
        reading = StoreReading.of(replies)
        if reading.version != reading.version_after:
            return  # a change came between the reads: the next check reads again
        snapshot = Snapshot.decode(reading.version, reading.plans, reading.tenants, reading.overrides)
        self._offset_ms = reading.server_ms - (before_ms + after_ms) // 2
        if snapshot.version >= self.snapshot.version:
            changed = snapshot.version != self.snapshot.version or not self.loaded
            self.snapshot = snapshot
            if changed:
                log.info("redis-ratelimit: policy store at version %d", snapshot.version)
        self.loaded = True
        self.metrics.plans(True, snapshot.version)

    def _failed(self, error: BaseException) -> None:
        self.metrics.plans_read_error()
        if not self.loaded:
            self.error = str(error) or type(error).__name__
            self.metrics.plans(False)

    def _defaults_of(self, base: Policy) -> tuple[LimitSpec, ...]:
        found = self._defaults.get(base.name)
        if found is None:
            specs = []
            for limit in base.limits:
                spec = LimitSpec.from_limit(limit)
                if spec is None:
                    raise ValueError(
                        f"policy '{base.name}', limit '{limit.name}': a store-backed policy's defaults "
                        f"are plan limits (amount per period of {or_list(_KINDS)}; "
                        "weight 1, not paced, not in-flight)"
                    )
                specs.append(spec)
            found = self._defaults[base.name] = tuple(specs)
        return found

    def policy_for(self, base: Policy, tenant: str) -> Policy:
        """The tenant's effective policy now: ``base`` with the store's limits."""
        assert base.tenant_input is not None
        defaults = self._defaults_of(base)
        specs = self.snapshot.resolve_classed(tenant, defaults, self.now_ms())
        cache_key = (base.name, specs)
        policy = self._policies.get(cache_key)
        if policy is None:
            try:
                policy = self._build(base, specs)
            except (ValueError, AlgorithmError):
                policy = self._build(base, tuple((spec, DEFAULT_KEY_CLASS) for spec in defaults))
            if len(self._policies) >= _MAX_POLICIES:
                self._policies.popitem(last=False)
            self._policies[cache_key] = policy
        else:
            self._policies.move_to_end(cache_key)
        return policy

    @staticmethod
    def _build(base: Policy, specs: tuple[tuple[LimitSpec, str], ...]) -> Policy:
        assert base.tenant_input is not None
        limits = [
            Limit.of(
                spec.name,
                spec.algorithm(),
                key=key_template(base.tenant_input, base.name, spec.name, spec.kind),
                # A plan's name is a limit name, so a valid class; were it not, unlabelled.
                key_class=key_class if check_class(key_class) else None,
            )
            for spec, key_class in specs
        ]
        return Policy(
            base.name,
            limits,
            lease=base.lease,
            fallback=base.fallback,
            timeout=base.timeout,
            deny_cache=base.deny_cache,
        )


def _read_commands() -> list[tuple[str, ...]]:
    return [
        ("GET", VERSION_KEY),
        ("HGETALL", PLANS_KEY),
        ("HGETALL", TENANTS_KEY),
        ("HGETALL", OVERRIDES_KEY),
        ("TIME",),
        ("GET", VERSION_KEY),
    ]


def _routing(redis: AsyncClient | SyncClient, command: tuple[str, ...]) -> dict[str, object]:
    """``TIME`` has no key: on a Cluster it goes to the node of the store's slot."""
    if command[0] == "TIME" and type(redis).__name__ == "RedisCluster":
        return {"target_nodes": redis.get_node_from_key(VERSION_KEY)}
    return {}


class PlanSource(_PlanSourceBase):
    """The policy store as this replica sees it, on a ``redis.asyncio`` client. ``await
    source.start()`` reads it once (if Redis is not there, the defaults apply meanwhile) and
    follows it in a task; ``await source.aclose()`` stops."""

    def __init__(
        self,
        redis: AsyncClient,
        *,
        check_every: float = 0.5,
        subscribe: bool = True,
        timeout: float = 1.0,
        metrics: Metrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(redis, check_every, subscribe, timeout, metrics, clock)
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        """Reads the store now (a consistent reading: the version before and after agree)."""
        before = self._clock.wall_ms()
        try:
            if type(self.redis).__name__ == "RedisCluster":
                await self.redis.initialize()
            commands = _read_commands()
            replies = await asyncio.wait_for(
                asyncio.gather(*(self.redis.execute_command(*c, **_routing(self.redis, c)) for c in commands)),
                self.timeout,
            )
            self._apply(replies, before, self._clock.wall_ms())
        except Exception as error:  # out of reach or refused: keep the snapshot, count it
            self._failed(error)

    async def start(self) -> PlanSource:
        await self.refresh()
        if self._task is None:
            self._task = asyncio.ensure_future(self._follow())
        return self

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _subscribed(self) -> PubSub | None:
        """A subscription to the change notifications, or ``None`` (then the version check
        alone follows the store, every ``check_every``)."""
        if not self.subscribe:
            return None
        try:
            pubsub = self.redis.pubsub()
            await asyncio.wait_for(pubsub.subscribe(CHANNEL), self.timeout)
        except Exception as error:  # no pub/sub here (or not now): poll instead
            log.info("redis-ratelimit: no change notifications (%s): checking the version instead", error)
            return None
        return pubsub

    async def _follow(self) -> None:
        while True:
            pubsub = None
            try:
                pubsub = await self._subscribed()
                await self.refresh()
                while True:
                    if pubsub is not None:
                        await pubsub.get_message(ignore_subscribe_messages=True, timeout=self.check_every)
                    else:
                        await asyncio.sleep(self.check_every)
                    await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the subscription was cut: subscribe again after a pause
                self._failed(error)
                await asyncio.sleep(self.check_every)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()


class SyncPlanSource(_PlanSourceBase):
    """:class:`PlanSource` on a sync ``redis.Redis``, followed by a daemon thread."""

    def __init__(
        self,
        redis: SyncClient,
        *,
        check_every: float = 0.5,
        subscribe: bool = True,
        timeout: float = 1.0,
        metrics: Metrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(redis, check_every, subscribe, timeout, metrics, clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        before = self._clock.wall_ms()
        try:
            replies = [self.redis.execute_command(*c, **_routing(self.redis, c)) for c in _read_commands()]
            self._apply(replies, before, self._clock.wall_ms())
        except Exception as error:  # out of reach or refused: keep the snapshot, count it
            self._failed(error)

    def start(self) -> SyncPlanSource:
        self.refresh()
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, name="redis-ratelimit-plans", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()

    def _subscribed(self) -> PubSub | None:
        if not self.subscribe:
            return None
        try:
            pubsub = self.redis.pubsub()
            pubsub.subscribe(CHANNEL)
        except Exception as error:  # no pub/sub here (or not now): poll instead
            log.info("redis-ratelimit: no change notifications (%s): checking the version instead", error)
            return None
        return pubsub

    def _follow(self) -> None:
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self._subscribed()
                self.refresh()
                while not self._stop.is_set():
                    if pubsub is not None:
                        pubsub.get_message(ignore_subscribe_messages=True, timeout=self.check_every)
                    else:
                        self._stop.wait(self.check_every)
                    self.refresh()
            except Exception as error:  # the subscription was cut: subscribe again after a pause
                self._failed(error)
                self._stop.wait(self.check_every)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        pubsub.close()
