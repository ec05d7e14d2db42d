"""A code-free wire format for elastic state: JSON with a few tagged objects.

Received bytes are only ever parsed as JSON, so a payload cannot run code (unlike
``pickle``). Carried: ``None``, bools, ints, floats (``nan``/``inf`` included), strings,
lists, dicts with string keys, and, tagged as one-key objects:

* ``{"__bytes__": base64}``: ``bytes``/``bytearray`` (decoded as ``bytes``);
* ``{"__tuple__": [...]}``: tuples;
* ``{"__set__": [...]}`` and ``{"__frozenset__": [...]}``: sets of hashable values;
* ``{"__ndarray__": {"dtype": "<f4", "shape": [2, 3], "data": base64}}``: numpy arrays of
  numeric or bool dtype (C order);
* ``{"__dict__": [[key, value], ...]}``: a dict whose keys are not all strings, or that has a
  key spelt like a tag.

Anything else raises :class:`StateCodecError` when encoding (name the value's path).
"""

from __future__ import annotations

import base64
import json
from typing import Any

_TAGS = ("__bytes__", "__tuple__", "__set__", "__frozenset__", "__ndarray__", "__dict__")
_MAX_DEPTH = 64


class StateCodecError(ValueError):
    """A value the state format cannot carry, or bytes that are not that format."""


def _enc(v: Any, path: str, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise StateCodecError(f"{path}: nested deeper than {_MAX_DEPTH}")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, tuple):
        return {"__tuple__": [_enc(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]}
    if isinstance(v, list):
        return [_enc(x, f"{path}[{i}]", depth + 1) for i, x in enumerate(v)]
    if isinstance(v, (set, frozenset)):
        tag = "__frozenset__" if isinstance(v, frozenset) else "__set__"
        return {tag: [_enc(x, f"{path}{{{i}}}", depth + 1) for i, x in enumerate(v)]}
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v) and not (len(v) == 1 and next(iter(v)) in _TAGS):
            return {k: _enc(x, f"{path}[{k!r}]", depth + 1) for k, x in v.items()}
        return {"__dict__": [[_enc(k, f"{path}.key", depth + 1),
                              _enc(x, f"{path}[{k!r}]", depth + 1)]
                             for k, x in v.items()]}
    np = _numpy()
    if np is not None and isinstance(v, np.generic):
        return _enc(v.item(), path, depth)
    if np is not None and isinstance(v, np.ndarray):
        if v.dtype.kind not in "biufc":
            raise StateCodecError(f"{path}: numpy dtype {v.dtype} is not numeric")
        a = np.ascontiguousarray(v)
        return {"__ndarray__": {"dtype": a.dtype.str, "shape": list(a.shape),
                                "data": base64.b64encode(a.tobytes()).decode()}}
    raise StateCodecError(
        f"{path}: a {type(v).__module__}.{type(v).__qualname__} cannot be carried as elastic "
        "state (plain data and numpy arrays only; use TorchState for torch modules)"
    )


def _dec(v: Any) -> Any:
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) == 1:
        (tag, body), = v.items()
        if tag == "__bytes__" and isinstance(body, str):
            return base64.b64decode(body, validate=True)
        if tag == "__tuple__" and isinstance(body, list):
            return tuple(_dec(x) for x in body)
        if tag in ("__set__", "__frozenset__") and isinstance(body, list):
            items = [_dec(x) for x in body]
            if any(isinstance(x, (list, dict)) for x in items):
                raise StateCodecError(f"a {tag} holds an unhashable value")
            return set(items) if tag == "__set__" else frozenset(items)
        if tag == "__dict__" and isinstance(body, list):
            out = {}
            for pair in body:
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise StateCodecError("a __dict__ entry is not a [key, value] pair")
                k = _dec(pair[0])
                if isinstance(k, (list, dict)):
                    raise StateCodecError(f"unhashable dict key {k!r}")
                out[k] = _dec(pair[1])
            return out
        if tag == "__ndarray__" and isinstance(body, dict):
            return _ndarray(body)
    return {k: _dec(x) for k, x in v.items()}


def _ndarray(body: dict[str, Any]) -> Any:
    np = _numpy()
    if np is None:
        raise StateCodecError("the state holds a numpy array but numpy is not installed")
    try:
        dt = np.dtype(body["dtype"])
        shape = tuple(int(d) for d in body["shape"])
        raw = base64.b64decode(body["data"], validate=True)
    except (KeyError, TypeError, ValueError) as e:
        raise StateCodecError(f"bad __ndarray__: {e}") from None
    if dt.kind not in "biufc":
        raise StateCodecError(f"bad __ndarray__: dtype {dt} is not numeric")
    n = 1
    for d in shape:
        n *= d
    if any(d < 0 for d in shape) or n * dt.itemsize != len(raw):
        raise StateCodecError(f"bad __ndarray__: shape {shape} of {dt} does not fit "
                              f"{len(raw)} bytes")
    return np.frombuffer(raw, dtype=dt).reshape(shape).copy()


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def encode(obj: Any) -> bytes:
    """``obj`` as UTF-8 JSON bytes; raises :class:`StateCodecError` for what cannot be
    carried."""
    return json.dumps(_enc(obj, "state", 0), allow_nan=True, separators=(",", ":")).encode()


def decode(data: bytes) -> Any:
    """The value :func:`encode` made; raises :class:`StateCodecError` for anything else (a
    pickle, say): nothing in ``data`` is executed."""
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise StateCodecError(f"elastic state is not the JSON state format: {e}") from None
    return _dec(parsed)
