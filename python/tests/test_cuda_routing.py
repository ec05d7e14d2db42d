"""CUDA tensors reach the engine's device path; CPU tensors never touch ``torch.cuda``.

There is no GPU here, so a CUDA tensor is stood in for by an object that speaks DLPack with a
CUDA device (``__dlpack_device__`` says kDLCUDA, ``__dlpack__`` hands over a ``dltensor``
capsule built with ctypes): the binding must route it to the device path on torch's current
stream of that device (asked through ``torch.cuda.current_stream``, passed to ``__dlpack__``)
and the engine must refuse it with the reason this process has no usable GPU, not as "a CPU
tensor on the wrong device". The backend registers for ``cpu`` and ``cuda``; a CPU-only job
makes no ``torch.cuda`` call at all.
"""

from __future__ import annotations

import ctypes
from datetime import timedelta
from typing import Any

import pytest
import torch
import torch.distributed as dist

import dtcomm
from dtcomm import torch_backend


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeCudaTensor:
    """Four float32 on "CUDA device `device`" at a device address the host never reads."""

    def __init__(self, device: int) -> None:
        self.device_index = device
        self.streams: list[Any] = []
        self._shape = (ctypes.c_int64 * 1)(4)
        self._managed = _DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = 0x7F00_0000_0000_0000  # like the twin: far from anything the host maps
        t.device = _DLDevice(2, device)  # kDLCUDA
        t.ndim = 1
        t.dtype = _DLDataType(2, 32, 1)  # float32
        t.shape = self._shape
        t.strides = None
        t.byte_offset = 0

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device_index)

    def __dlpack__(self, stream: Any = None) -> Any:
        self.streams.append(stream)
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)


@pytest.fixture
def world1() -> Any:
    store = dist.HashStore()
    dist.init_process_group("dtcomm", store=store, rank=0, world_size=1, timeout=timedelta(seconds=30))
    yield dist.group.WORLD
    dist.destroy_process_group()


def _comm(group: Any) -> dtcomm._dtcomm.Communicator:
    return group._get_backend(torch.device("cpu")).communicator


def test_the_backend_registers_for_cpu_and_cuda() -> None:
    torch_backend.register()
    assert torch_backend.DEVICES == ["cpu", "cuda"]
    assert dist.Backend.backend_capability["dtcomm"] == ["cpu", "cuda"]


# torch numbers the legacy default stream 0; DLPack calls it 1 (its 0 is not allowed).
@pytest.mark.parametrize("torch_stream,dlpack_stream", [(0x5EED0, 0x5EED0), (0, 1)])
def test_a_cuda_tensor_goes_to_the_device_path_on_torchs_current_stream(
    world1: Any, monkeypatch: pytest.MonkeyPatch, torch_stream: int, dlpack_stream: int
) -> None:
    class Stream:
        cuda_stream = torch_stream

    asked: list[int] = []

    def current_stream(device: int) -> Stream:
        asked.append(device)
        return Stream()

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    fake = FakeCudaTensor(device=1)
    with pytest.raises(ValueError) as e:
        _comm(world1).all_reduce(fake, 1)
    msg = str(e.value)
    # Routed to the device path, refused there with why this process cannot use a GPU.
    assert "rank 0: invalid arguments to all_reduce: device buffers cannot be used here" in msg, msg
    assert "takes CPU tensors" not in msg, msg
    status = dtcomm.cuda_status()
    if status["built_with_cuda"]:
        assert status["reason"] and status["reason"] in msg, (status["reason"], msg)
    else:
        assert "built without CUDA support" in msg, msg
    assert asked == [1], "torch's current stream of the tensor's device"
    assert fake.streams == [dlpack_stream], "that stream told to __dlpack__"
    # The communicator is unharmed.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_cpu_only_collectives_make_no_torch_cuda_call(world1: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("torch.cuda was called for CPU tensors")

    for name in ("current_stream", "is_available", "stream", "device_count", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, boom)
    t = torch.arange(4.0)
    dist.all_reduce(t)
    w = dist.all_reduce(t, async_op=True)
    assert w is not None
    w.wait()
    out = [torch.empty(4) for _ in range(1)]
    dist.all_gather(out, t)
    dist.broadcast(t, 0)
    dist.barrier()
    assert out[0].tolist() == t.tolist()
