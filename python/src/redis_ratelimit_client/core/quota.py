"""The interface every algorithm's parameters share (the Rust core's ``Algorithm`` trait and
``kinds`` table, in one place): a quota evaluates a call against a key's state."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from .decision import Evaluation


class Quota(ABC):
    """Validated parameters of one call of one algorithm.

    ``kind`` names the algorithm by its short name (``token``, ``sliding``..., the generated
    ``_kinds.py``'s); a key holding another kind's state is not this quota's.
    """

    __slots__ = ()
    kind: str

    @property
    @abstractmethod
    def cost(self) -> int:
        """Units the call asks for."""

    @abstractmethod
    def with_cost(self, cost: int) -> Quota:
        """The same quota for a call of ``cost`` units (0 is read as 1)."""

    def counted_cost(self) -> int:
        """Units a call counts against the limit, for telling how many such calls are left."""
        return self.cost

    @abstractmethod
    def evaluate(self, state: Any, now_us: int) -> Evaluation[Any]:
        """Decides a call at ``now_us`` on ``state`` (``None``: a missing key)."""

    @abstractmethod
    def refund(self, state: Any, now_us: int) -> Evaluation[Any]:
        """Gives the call's cost back, never beyond the limit."""

    @abstractmethod
    def grantable(self, state: Any, up_to: int, now_us: int) -> int:
        """The most units, up to ``up_to``, a call could take now."""

    @staticmethod
    @abstractmethod
    def apply(state: Any, change: Any) -> Any:
        """The state after a committed change (the same object, or a new one)."""

    @staticmethod
    @abstractmethod
    def create(change: Any) -> Any:
        """The state of a missing key once ``change`` is applied."""

    @staticmethod
    def is_vacant(state: Any) -> bool:
        """Whether the state holds nothing a missing key would not (an emptied in-flight list)."""
        return False
