"""The agents' relay of their workers' summaries (``dtcomm._relay``), with a store and a member
of its own: only the node's own workers' records go, at most once a second, the world read from
the store when not given, and nothing that goes wrong stops the caller (torch's agent)."""

from __future__ import annotations

from typing import Any

from dtcomm import _relay


class Store:
    def __init__(self, keys: dict[str, bytes], fail: bool = False) -> None:
        self.keys = keys
        self.fail = fail

    def check(self, keys: list[str]) -> bool:
        if self.fail:
            raise OSError("the store went away")
        return all(k in self.keys for k in keys)

    def get(self, key: str, timeout: float | None = None) -> bytes:
        return self.keys[key]


class Member:
    def __init__(self) -> None:
        self.relays: list[tuple[int, list[bytes]]] = []

    def relay_records(self, world: int, records: list[bytes]) -> int:
        self.relays.append((world, records))
        return len(records)


def test_the_nodes_workers_go_once_a_second_and_failures_do_not_escape(
        monkeypatch: Any) -> None:
    clock = [100.0]
    monkeypatch.setattr(_relay.time, "monotonic", lambda: clock[0])
    store = Store({"dtcomm/progress/world": b"4", "dtcomm/progress/2": b"r2",
                   "dtcomm/progress/0": b"r0"})
    member = Member()
    # An agent whose workers are ranks 2 and 3 of the world the store says (rank 3 has not
    # published yet; rank 0 is another node's).
    relay = _relay.Relay(member, _relay.opened(store),  # type: ignore[arg-type]
                         lambda world: [world // 2, world // 2 + 1])
    relay.step()
    assert member.relays == [(4, [b"r2"])]
    relay.step()  # within the second: nothing
    assert len(member.relays) == 1
    clock[0] += 1.0
    store.fail = True
    relay.step()  # the store fails: skipped, no exception
    assert len(member.relays) == 1
    clock[0] += 1.0
    store.fail = False
    store.keys["dtcomm/progress/3"] = b"r3"
    relay.step()
    assert member.relays[-1] == (4, [b"r2", b"r3"])
    # A store that is not up yet: nothing relayed, tried again the next second.
    opened: list[int] = []
    late = _relay.Relay(member, lambda: opened.append(1) or None, _relay.fixed([0]), 4)
    late.step()
    clock[0] += 1.0
    late.step()
    assert opened == [1, 1] and len(member.relays) == 2
