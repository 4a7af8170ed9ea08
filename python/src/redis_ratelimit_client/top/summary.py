"""A Space-Saving summary (Metwally, Agrawal, El Abbadi, 2005): the most frequent keys of a
stream in at most ``capacity`` counters, the Rust client's ``top/summary.rs`` line for line
(the same stream gives the same counters). A key not held takes the place of the least
counted one, inheriting its count as its error, so for every key held
``count - error <= true count <= count``, a key not held was seen at most ``floor`` times
(the least count, once full), and ``error <= floor <= total / capacity``. Summaries of
several replicas merge by adding (:mod:`.merge`).

The counters are a binary min-heap on count with an index from key to place: counting a key
held or replacing the least one is O(log capacity).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Longest key kept, in UTF-8 bytes: a longer one is cut at a character boundary (two keys
#: that differ only past it are counted as one).
MAX_KEY_BYTES = 256


@dataclass(slots=True)
class Counted:
    """One counter: ``key`` seen at most ``count`` times, at most ``error`` of them other
    keys' (inherited when it took its place)."""

    key: str
    count: int
    error: int


def bounded(key: str) -> str:
    """``key`` cut to :data:`MAX_KEY_BYTES` at a character boundary."""
    if len(key) * 4 <= MAX_KEY_BYTES:
        return key
    encoded = key.encode("utf-8")
    if len(encoded) <= MAX_KEY_BYTES:
        return key
    return encoded[:MAX_KEY_BYTES].decode("utf-8", errors="ignore")


class SpaceSaving:
    """A Space-Saving summary of at most ``capacity`` keys (at least 1)."""

    __slots__ = ("_heap", "_places", "capacity", "total")

    def __init__(self, capacity: int) -> None:
        self.capacity = max(capacity, 1)
        #: A min-heap on ``count``.
        self._heap: list[Counted] = []
        #: Key -> its place in the heap.
        self._places: dict[str, int] = {}
        #: Everything counted.
        self.total = 0

    def add(self, key: str, by: int = 1) -> None:
        """Counts ``key`` ``by`` times."""
        self.total += by
        key = bounded(key)
        place = self._places.get(key)
        if place is not None:
            self._heap[place].count += by
            self._sift_down(place)
            return
        if len(self._heap) < self.capacity:
            place = len(self._heap)
            self._places[key] = place
            self._heap.append(Counted(key, by, 0))
            self._sift_up(place)
            return
        # Full: the least counted key gives its place, and its count as the error.
        least = self._heap[0]
        del self._places[least.key]
        least.key, least.error, least.count = key, least.count, least.count + by
        self._places[key] = 0
        self._sift_down(0)

    def is_empty(self) -> bool:
        return not self._heap

    def __len__(self) -> int:
        return len(self._heap)

    def floor(self) -> int:
        """The most a key not held was counted: 0 until full (every key counted is held,
        exactly), then the least count."""
        if len(self._heap) < self.capacity or not self._heap:
            return 0
        return self._heap[0].count

    def counted(self) -> list[Counted]:
        """The counters, most counted first (ties by key), as copies."""
        ordered = sorted(self._heap, key=lambda counted: (-counted.count, counted.key))
        return [Counted(counted.key, counted.count, counted.error) for counted in ordered]

    def _swap(self, a: int, b: int) -> None:
        heap = self._heap
        heap[a], heap[b] = heap[b], heap[a]
        self._places[heap[a].key] = a
        self._places[heap[b].key] = b

    def _sift_up(self, place: int) -> None:
        heap = self._heap
        while place > 0:
            parent = (place - 1) // 2
            if heap[place].count < heap[parent].count:
                self._swap(place, parent)
                place = parent
            else:
                return

    def _sift_down(self, place: int) -> None:
        heap = self._heap
        size = len(heap)
        while True:
            left = 2 * place + 1
            least = place
            for child in (left, left + 1):
                if child < size and heap[child].count < heap[least].count:
                    least = child
            if least == place:
                return
            self._swap(place, least)
            place = least
