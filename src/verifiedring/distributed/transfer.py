"""Tensor metadata and the collective phase of a broadcast, coalesced.

The manifest phase (through the MessageQueue) tells every receiver a
:class:`TensorMeta` per tensor; receivers allocate from it. Then
:func:`broadcast_tensors` moves the bytes, the same call on every rank:

* Tensors are grouped by device type. Those smaller than
  ``TransferOptions.large_bytes`` are **coalesced** into one flat ``uint8``
  buffer per device type (offsets aligned to 16 bytes), so a dict of many small
  tensors costs one collective per group whatever their dtypes. Larger tensors
  go one collective each (no extra copy on either side).
* Every transfer is of the raw bytes (``view(torch.uint8)``), so dtypes a
  backend lacks (gloo: some of bool, bfloat16, complex) travel unchanged, and
  receivers get the sender's bit patterns exactly, NaN payloads included.
* CPU tensors go over ``cpu_group`` (gloo); device tensors over
  ``device_group`` (NCCL) when given, else over ``cpu_group`` (gloo carries
  CUDA tensors too, which is how one GPU serves several ranks).
* Empty tensors move no bytes; 0-d and non-contiguous tensors are handled by
  the byte copy (non-contiguous destinations are filled through a temporary).

Both sides derive the same bucketing from the same metas, so nothing about the
layout is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

ALIGN = 16
DEFAULT_LARGE_BYTES = 256 << 10  # bench/tensor_dict.py: 256 KiB-1 MiB best over gloo


@dataclass(frozen=True)
class TensorMeta:
    """What a receiver needs to allocate a tensor: dtype, shape, device type."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    device: str

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        return cls(t.dtype, tuple(t.shape), t.device.type)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def local_device(self) -> torch.device:
        """This rank's device of the sender's device type (CUDA: the current one)."""
        if self.device == "cuda":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device(self.device)

    def matches(self, t: torch.Tensor) -> bool:
        """Whether ``t`` can receive this tensor in place."""
        return (
            t.dtype == self.dtype and tuple(t.shape) == self.shape and t.device.type == self.device
        )

    def empty(self) -> torch.Tensor:
        return torch.empty(self.shape, dtype=self.dtype, device=self.local_device())


@dataclass(frozen=True)
class TransferOptions:
    """Knobs of the collective phase.

    ``large_bytes``: tensors of at least this many bytes skip the coalesced
    buffer and go one collective each (``bench/tensor_dict.py`` measures the
    trade-off). ``coalesce=False`` sends every tensor on its own (the baseline).
    """

    large_bytes: int = DEFAULT_LARGE_BYTES
    coalesce: bool = True


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class _Bucket:
    device: str
    slots: tuple[tuple[int, int, int], ...]  # (tensor index, byte offset, nbytes)
    total: int


def plan_buckets(
    metas: list[TensorMeta], options: TransferOptions
) -> tuple[list[_Bucket], list[int]]:
    """Split tensor indices into coalesced buckets (one per device type) and singles."""
    buckets: dict[str, list[tuple[int, int, int]]] = {}
    totals: dict[str, int] = {}
    singles: list[int] = []
    for i, m in enumerate(metas):
        n = m.nbytes
        if n == 0:
            continue
        if not options.coalesce or n >= options.large_bytes:
            singles.append(i)
            continue
        off = totals.get(m.device, 0)
        buckets.setdefault(m.device, []).append((i, off, n))
        totals[m.device] = _align(off + n)
    return [_Bucket(dev, tuple(slots), totals[dev]) for dev, slots in buckets.items()], singles


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of a contiguous copy of ``t`` (a view when ``t`` is contiguous)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def broadcast_tensors(
    tensors: list[torch.Tensor],
    metas: list[TensorMeta],
    *,
    is_src: bool,
    src_global: int,
    cpu_group: ProcessGroup | None,
    device_group: ProcessGroup | None,
    options: TransferOptions,
) -> None:
    """Broadcast ``tensors`` (sender) into ``tensors`` (receivers' destinations).

    Called on every rank of the group with the same ``metas``; receivers'
    destinations must already match them (``TensorMeta.matches``).
    """
    import torch.distributed as dist

    if not tensors:
        return
    buckets, singles = plan_buckets(metas, options)

    def group_for(device: str) -> ProcessGroup | None:
        return cpu_group if device == "cpu" or device_group is None else device_group

    works: list[Any] = []
    staged: list[tuple[torch.Tensor, _Bucket | int]] = []
    for b in buckets:
        buf = _bucket_buffer(b, tensors, metas, is_src)
        works.append(dist.broadcast(buf, src_global, group=group_for(b.device), async_op=True))
        staged.append((buf, b))
    for i in singles:
        payload = _single_payload(tensors, metas, i, is_src, staged)
        works.append(
            dist.broadcast(payload, src_global, group=group_for(metas[i].device), async_op=True)
        )
    for w in works:
        w.wait()
    if not is_src:
        _unstage(tensors, metas, staged)


def _bucket_buffer(
    b: _Bucket, tensors: list[torch.Tensor], metas: list[TensorMeta], is_src: bool
) -> torch.Tensor:
    """The bucket's one byte buffer, on its device; the sender's holds its tensors' bytes."""
    dev = metas[b.slots[0][0]].local_device()
    buf = torch.empty(b.total, dtype=torch.uint8, device=dev)
    if is_src:
        for i, off, n in b.slots:
            buf[off : off + n].copy_(as_bytes(tensors[i]))
    return buf


def _single_payload(
    tensors: list[torch.Tensor],
    metas: list[TensorMeta],
    i: int,
    is_src: bool,
    staged: list[tuple[torch.Tensor, _Bucket | int]],
) -> torch.Tensor:
    """The bytes tensor ``i`` travels in: a receiver's non-contiguous one is staged."""
    t = tensors[i]
    if is_src:
        return as_bytes(t)
    if t.is_contiguous():
        return t.reshape(-1).view(torch.uint8)  # received in place
    payload = torch.empty(metas[i].nbytes, dtype=torch.uint8, device=t.device)
    staged.append((payload, i))
    return payload


def _unstage(
    tensors: list[torch.Tensor],
    metas: list[TensorMeta],
    staged: list[tuple[torch.Tensor, _Bucket | int]],
) -> None:
    """A receiver's staged bytes (buckets, non-contiguous singles) into their tensors."""
    for buf, what in staged:
        if isinstance(what, int):
            _copy_bytes_into(tensors[what], buf, metas[what])
        else:
            for i, off, n in what.slots:
                _copy_bytes_into(tensors[i], buf[off : off + n], metas[i])


def _copy_bytes_into(dest: torch.Tensor, data: torch.Tensor, meta: TensorMeta) -> None:
    if dest.is_contiguous():
        dest.reshape(-1).view(torch.uint8).copy_(data)
    else:
        dest.copy_(data.view(meta.dtype).view(meta.shape))
