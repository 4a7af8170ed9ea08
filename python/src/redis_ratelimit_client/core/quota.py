"""The interface every algorithm's parameters share (the Rust core's ``Algorithm`` trait and
``kinds`` table, in one place): a quota evaluates a call against a key's state."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeAlias, TypeVar

from .._kinds import Kind
from .decision import Evaluation

#: A key's state under one kind of limiter (``TokenBucket``, ``SlidingLog``...).
S = TypeVar("S")
#: What an admitted call of that kind writes (a state, or a change to apply to one).
C = TypeVar("C")


class Quota(ABC, Generic[S, C]):
    """Validated parameters of one call of one algorithm, over its states ``S`` and the
    changes ``C`` its calls commit.

    ``kind`` names the algorithm (``Kind.TOKEN_BUCKET``..., the generated ``_kinds.py``'s);
    a key holding another kind's state is not this quota's.
    """

    __slots__ = ()
    kind: Kind

    @property
    @abstractmethod
    def cost(self) -> int:
        """Units the call asks for."""

    @abstractmethod
    def with_cost(self, cost: int) -> Quota[S, C]:
        """The same quota for a call of ``cost`` units (0 is read as 1)."""

    def counted_cost(self) -> int:
        """Units a call counts against the limit, for telling how many such calls are left."""
        return self.cost

    @abstractmethod
    def evaluate(self, state: S | None, now_us: int) -> Evaluation[C]:
        """Decides a call at ``now_us`` on ``state`` (``None``: a missing key)."""

    @abstractmethod
    def refund(self, state: S | None, now_us: int) -> Evaluation[C]:
        """Gives the call's cost back, never beyond the limit."""

    @abstractmethod
    def grantable(self, state: S | None, up_to: int, now_us: int) -> int:
        """The most units, up to ``up_to``, a call could take now."""

    @staticmethod
    @abstractmethod
    def apply(state: S, change: C) -> S:
        """The state after a committed change (the same object, or a new one)."""

    @staticmethod
    @abstractmethod
    def create(change: C) -> S:
        """The state of a missing key once ``change`` is applied."""

    @staticmethod
    def is_vacant(state: S) -> bool:
        """Whether the state holds nothing a missing key would not (an emptied in-flight list)."""
        return False


#: A quota of any kind: what a call over several kinds at once holds (each quota reads
#: only its own kind's states: the engine checks a key's kind before handing it its state).
AnyQuota: TypeAlias = Quota[Any, Any]
