"""``hvd.elastic.ElasticSampler``: partitions a dataset over the ranks and, after a reset,
repartitions what this epoch has not processed yet (Horovod 0.28's sampler)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Sized
from typing import Any

import torch.utils.data

from .. import _core


class ElasticSampler(torch.utils.data.Sampler[int]):
    """Like ``DistributedSampler``, but remembers what was processed this epoch.

    Put it in the ``TorchState``; call ``record_batch`` after each batch (Horovod 0.28: counts
    ``batch_size * num_replicas`` samples of the epoch's order as processed) or
    ``record_indices`` (older Horovod: marks those dataset indices processed); call
    ``set_epoch`` at the end of each epoch. After a reset (``reset()``, or
    ``load_state_dict`` on a restore/sync), iteration covers only the unprocessed indices,
    split over the current ranks. ``shuffle``: a permutation seeded by ``seed + epoch``, the
    same on every rank.
    """

    def __init__(self, dataset: Sized, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.processed_indices: set[int] = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices: list[int] = []
        self.indices: list[int] = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts ``epoch``: nothing processed yet, a new order when shuffling."""
        self.epoch = epoch
        self.processed_num = 0
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Counts one batch of every rank (``batch_size * num_replicas`` samples) processed."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices: Iterable[int]) -> None:
        """Marks these dataset indices processed."""
        self.processed_indices.update(int(i) for i in indices)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "processed_num": self.processed_num,
                "processed_indices": sorted(self.processed_indices)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch = int(state_dict["epoch"])
        self.processed_num = int(state_dict["processed_num"])
        self.processed_indices = {int(i) for i in state_dict.get("processed_indices", [])}
        self.reset()

    def reset(self) -> None:
        """Repartitions the unprocessed indices over the current ranks."""
        self.num_replicas = _core.size()
        self.rank = _core.rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = [i for i in order[self.processed_num:]
                                  if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        indices = self.remaining_indices[:]
        # Pad (from the front, repeatedly if needed) to split evenly.
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples
