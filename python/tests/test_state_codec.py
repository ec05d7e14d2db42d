"""Elastic state moves without pickle: the JSON state codec round-trips plain data and numpy
arrays, and refuses (without running) a pickle sent as state; torch state is read with
``weights_only=True``."""

from __future__ import annotations

import io
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from dtcomm import elastic
from dtcomm._state_codec import StateCodecError, decode, encode

PKG = Path(__file__).resolve().parents[1] / "dtcomm"


class _Boom:
    """Unpickling this runs ``os.system`` (writes a marker file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def test_sets_round_trip_and_unhashable_members_are_refused() -> None:
    out = decode(encode({"names": {"a", "b"}, "frozen": frozenset({(1, 2)}), "empty": set()}))
    assert out == {"names": {"a", "b"}, "frozen": frozenset({(1, 2)}), "empty": set()}
    assert type(out["frozen"]) is frozenset and type(out["names"]) is set
    with pytest.raises(StateCodecError, match="unhashable"):
        decode(b'{"__set__": [[1, 2]]}')


def test_plain_state_round_trips() -> None:
    state = {
        "step": 7, "lr": 0.5, "nan": float("inf"), "name": "x", "ok": True, "none": None,
        "rounds": [1, 2, (3, "a")], "blob": b"\x00\xff", "ids": {1: "one", (2, 3): "pair"},
        "tag_like": {"__bytes__": "not a tag"},
        "w": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.int64(5),
    }
    out = decode(encode(state))
    assert out["step"] == 7 and out["lr"] == 0.5 and out["nan"] == float("inf")
    assert out["rounds"] == [1, 2, (3, "a")] and out["blob"] == b"\x00\xff"
    assert out["ids"] == {1: "one", (2, 3): "pair"}
    assert out["tag_like"] == {"__bytes__": "not a tag"}
    assert out["w"].dtype == np.float32 and out["w"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert out["i"] == 5 and out["none"] is None and out["ok"] is True


def test_an_unsupported_value_is_named_when_encoding() -> None:
    with pytest.raises(StateCodecError, match=r"state\['obj'\].*cannot be carried"):
        encode({"obj": object()})


def test_a_pickle_sent_as_state_is_refused_and_inert(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"step": _Boom(marker)})
    with pytest.raises(StateCodecError, match="not the JSON state format"):
        decode(payload)
    assert not marker.exists()
    # Bad tagged content is refused too, not half-decoded.
    bad = b'{"__ndarray__": {"dtype": "|O", "shape": [1], "data": ""}}'
    with pytest.raises(StateCodecError, match="not numeric"):
        decode(bad)
    with pytest.raises(StateCodecError, match="does not fit"):
        decode(b'{"__ndarray__": {"dtype": "<f4", "shape": [3], "data": "AAAA"}}')


def test_torch_state_is_loaded_weights_only(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(2, 1)
    blob = elastic._torch_blob({"model": model})
    got = elastic._torch_unblob(blob)
    assert torch.equal(got["model"]["weight"], model.state_dict()["weight"])
    marker = tmp_path / "pwned"
    b = io.BytesIO()
    torch.save({"model": _Boom(marker)}, b)
    with pytest.raises(StateCodecError, match="refusing torch state"):
        elastic._torch_unblob(b.getvalue())
    assert not marker.exists()


def test_no_received_bytes_are_unpickled_in_the_package() -> None:
    offenders = []
    for f in PKG.rglob("*.py"):
        text = f.read_text()
        if re.search(r"pickle\.loads?\(|weights_only\s*=\s*False|import pickle", text):
            offenders.append(f.name)
    assert offenders == []


def test_elastic_run_raises_a_mismatch_instead_of_retrying(monkeypatch: pytest.MonkeyPatch) -> None:
    """A MismatchError is a program error: ``run`` raises it at once; a lost peer still
    starts a new round."""
    from types import SimpleNamespace

    from dtcomm import _api, _dtcomm

    monkeypatch.setattr(_api, "is_initialized", lambda: True)
    monkeypatch.setattr(_api, "_g", lambda op: SimpleNamespace(member=object()))
    renewed: list[str] = []
    monkeypatch.setattr(_api, "_renew", lambda reason: renewed.append(reason))
    monkeypatch.setattr(_api, "barrier", lambda: None)
    state = elastic.ObjectState(step=0)
    monkeypatch.setattr(state, "sync", lambda: None)
    calls: list[int] = []

    def mismatched(s: elastic.State) -> None:
        calls.append(1)
        raise _dtcomm.MismatchError("rank 0: allreduce seq 3: rank 1 called broadcast")

    with pytest.raises(_dtcomm.MismatchError):
        elastic.run(mismatched, state)
    assert calls == [1] and renewed == []

    def lost_once(s: elastic.State) -> str:
        calls.append(2)
        if len(renewed) == 0:
            raise _dtcomm.PeerLostError("rank 0: peer 1 lost")
        return "done"

    assert elastic.run(lost_once, state) == "done"
    assert len(renewed) == 1 and "PeerLostError" in renewed[0]
