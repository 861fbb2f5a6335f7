"""The communicator protocol every backend implements (torch.distributed, mpi4py, simulated)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import torch

__all__ = ["Communicator", "ReduceOp"]

ReduceOp = str  # "sum" | "max" | "min"


class Communicator(ABC):
    """A group of ranks that exchange tensors.

    All ranks of the group must call the collective methods (`all_reduce`, `all_gather`,
    `all_to_all`, `all_to_all_counts`, `broadcast_object`, `barrier`) in the same order.
    `exchange` is point-to-point: a rank only talks to the peers named in its arguments, and
    both sides agree on the row counts beforehand (a `HaloPlan` guarantees this).
    """

    rank: int
    size: int

    @abstractmethod
    def exchange(
        self,
        sends: Mapping[int, torch.Tensor],
        recv_counts: Mapping[int, int],
        template: torch.Tensor,
    ) -> dict[int, torch.Tensor]:
        """Send `sends[peer]` to each peer and receive `recv_counts[peer]` rows from each.

        Received tensors have the dtype, device and trailing shape of `template`. Peers are
        other ranks (never `self.rank`); zero-row messages may be skipped by both sides.
        """

    @abstractmethod
    def all_reduce(self, tensor: torch.Tensor, op: ReduceOp = "sum") -> torch.Tensor:
        """Element-wise reduction over all ranks; returns a new tensor, identical everywhere."""

    @abstractmethod
    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's tensor (leading sizes may differ; trailing shapes must match)."""

    @abstractmethod
    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """A picklable object from `src`, returned on every rank."""

    @abstractmethod
    def barrier(self) -> None:
        """Wait until every rank arrives."""

    def end_job(self, message: str) -> NoReturn:
        """End this rank's part in the group when its peers may wait for it in a collective
        that it cannot finish. Ranks in one process (this default) raise `RuntimeError`;
        ranks in their own processes print `message` and end the whole job."""
        raise RuntimeError(message)

    def all_to_all(
        self,
        sends: Sequence[torch.Tensor],
        recv_counts: Sequence[int],
        template: torch.Tensor,
    ) -> list[torch.Tensor]:
        """`sends[q]` goes to rank q (collective; every rank sends one tensor to every rank,
        empty ones included); returns the tensor each rank q sent here, of `recv_counts[q]`
        rows and the dtype, device and trailing shape of `template`. This default runs
        `exchange` with every peer; a backend with a native all-to-all overrides it."""
        if len(sends) != self.size or len(recv_counts) != self.size:
            raise ValueError(f"need one tensor and one count per rank ({self.size})")
        peers = [q for q in range(self.size) if q != self.rank]
        received = self.exchange(
            {q: sends[q] for q in peers if sends[q].shape[0] > 0},
            {q: recv_counts[q] for q in peers if recv_counts[q] > 0},
            template,
        )
        empty = template.new_empty((0, *template.shape[1:]))
        received[self.rank] = sends[self.rank].to(template.device)
        return [received.get(q, empty) for q in range(self.size)]

    def all_to_all_single(
        self, x: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int]
    ) -> torch.Tensor:
        """`all_to_all` of one tensor's rows (collective): `send_counts[q]` rows of `x` in
        order go to each rank q; returns the `recv_counts[q]` rows from each rank q,
        concatenated in rank order. A backend that exchanges from and into single buffers
        overrides it to copy neither."""
        received = self.all_to_all(list(x.split(list(send_counts))), recv_counts, template=x)
        return torch.cat(received)

    def all_to_all_counts(self, counts: Sequence[int]) -> list[int]:
        """`counts[q]` is what this rank sends to q; returns what each rank sends to this one."""
        if len(counts) != self.size:
            raise ValueError(f"need one count per rank ({self.size}), got {len(counts)}")
        table = self.all_gather(torch.as_tensor(list(counts), dtype=torch.long).unsqueeze(0))
        return [int(row[0, self.rank]) for row in table]

    def gather_by_id(
        self, ids: torch.Tensor, fields: Mapping[str, torch.Tensor], dst: int | None = None
    ) -> dict[str, torch.Tensor] | None:
        """Every rank's rows of `fields`, concatenated and ordered by the rows' global `ids`
        (collective). With `dst` None the result is identical on every rank (an all-gather);
        with `dst` each rank sends its rows to `dst` only, which returns them, and the others
        return None (one collective of row counts, then point-to-point messages)."""
        if dst is None:
            order = torch.argsort(torch.cat(self.all_gather(ids)))
            return {n: v[order] for n, v in self.all_gather_rows(fields).items()}
        rows = self._rows_to(dst, [ids, *fields.values()])
        if rows is None:
            return None
        order = torch.argsort(rows[0])
        return {name: value[order] for name, value in zip(fields, rows[1:], strict=True)}

    def all_reduce_sums(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each of `tensors` summed over all ranks (collective): one all-reduce per dtype,
        the tensors of a dtype side by side."""
        summed = {}
        for names in _names_by_dtype(tensors):
            flat = torch.cat([tensors[n].reshape(-1) for n in names])
            parts = self.all_reduce(flat, "sum").split([tensors[n].numel() for n in names])
            for name, part in zip(names, parts, strict=True):
                summed[name] = part.reshape(tensors[name].shape)
        return summed

    def all_gather_rows(
        self, fields: Mapping[str, torch.Tensor], summed: Mapping[str, torch.Tensor] | None = None
    ) -> dict[str, torch.Tensor]:
        """Every rank's rows of `fields` (one row count per rank), concatenated in rank
        order, and each of `summed` summed over all ranks (collective): one all-gather per
        dtype, the fields of a dtype side by side, that dtype's `summed` after them."""
        gathered, summed = {}, summed or {}
        for names in _names_by_dtype({**fields, **summed}):
            rows = [n for n in names if n in fields]
            flat = [fields[n].reshape(len(fields[n]), math.prod(fields[n].shape[1:])) for n in rows]
            widths = [part.shape[1] for part in flat]
            sums = [n for n in names if n in summed]
            if sums:
                tail = torch.cat([summed[n].reshape(-1) for n in sums])
                block = [torch.cat(flat, dim=1).reshape(-1)] if flat else []
                parts = self.all_gather(torch.cat([*block, tail]))
                cuts = [part.numel() - tail.numel() for part in parts]
                # summed as an all-reduce sums: the ranks' values stacked in rank order
                totals = torch.stack([p[c:] for p, c in zip(parts, cuts, strict=True)]).sum(0)
                counts = [summed[n].numel() for n in sums]
                for name, total in zip(sums, totals.split(counts), strict=True):
                    gathered[name] = total.reshape(summed[name].shape)
                parts = [p[:c] for p, c in zip(parts, cuts, strict=True)]
            else:
                parts = self.all_gather(torch.cat(flat, dim=1))
            if rows:
                block = torch.cat([part.reshape(-1, sum(widths)) for part in parts])
                for name, part in zip(rows, block.split(widths, dim=1), strict=True):
                    gathered[name] = part.reshape(-1, *fields[name].shape[1:])
        return gathered

    def _rows_to(self, dst: int, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        """Each of `tensors` (one row count per rank) concatenated over the ranks in rank
        order, on `dst`; None elsewhere."""
        if not 0 <= dst < self.size:
            raise ValueError(f"dst must be a rank of this group (0..{self.size - 1}), got {dst}")
        count = int(tensors[0].shape[0])
        incoming = self.all_to_all_counts([count if q == dst else 0 for q in range(self.size)])
        recv_counts = {q: c for q, c in enumerate(incoming) if c > 0 and q != self.rank}
        sends = count > 0 and self.rank != dst
        gathered = []
        for value in tensors:
            received = self.exchange({dst: value} if sends else {}, recv_counts, value)
            if self.rank == dst:
                received[dst] = value
                gathered.append(torch.cat([received[q] for q in sorted(received)]))
        return gathered if self.rank == dst else None

    def scatter_rows(
        self,
        fields: Mapping[str, torch.Tensor],
        owner: torch.Tensor | None,
        schema: Mapping[str, tuple[torch.dtype, tuple[int, ...]]],
    ) -> dict[str, torch.Tensor]:
        """Rank 0 sends each row of each of `fields` to the rank `owner` names (collective;
        other ranks pass no fields and None). `schema`, the same on every rank, gives each
        field's dtype and trailing shape. Returns this rank's rows in rank 0's order, on the
        CPU."""
        if self.rank == 0:
            owner = owner.cpu()
        received = {}
        for name, (dtype, trailing) in schema.items():
            template = torch.empty((0, *trailing), dtype=dtype)
            sends = {}
            if self.rank == 0:
                values = fields[name].cpu()
                sends = {q: values[owner == q] for q in range(self.size)}
            received[name] = self.exchange_variable(sends, template=template).get(0, template)
        return received

    def exchange_variable(
        self, sends: Mapping[int, torch.Tensor], template: torch.Tensor
    ) -> dict[int, torch.Tensor]:
        """Like `exchange` when receivers do not know the counts: one collective of counts
        first (all ranks must call this), then point-to-point messages."""
        counts = [0] * self.size
        for peer, tensor in sends.items():
            counts[peer] = int(tensor.shape[0])
        incoming = self.all_to_all_counts(counts)
        recv_counts = {peer: c for peer, c in enumerate(incoming) if c > 0 and peer != self.rank}
        local = {peer: t for peer, t in sends.items() if peer != self.rank and t.shape[0] > 0}
        received = self.exchange(local, recv_counts, template)
        if self.rank in sends:
            received[self.rank] = sends[self.rank]
        return received

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"


def _names_by_dtype(tensors: Mapping[str, torch.Tensor]) -> list[list[str]]:
    """The names of `tensors` grouped by dtype, in their order."""
    groups: dict[torch.dtype, list[str]] = {}
    for name, value in tensors.items():
        groups.setdefault(value.dtype, []).append(name)
    return list(groups.values())
