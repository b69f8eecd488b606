"""Tensors between the judge and the candidate worker, through shared memory the judge owns.

The judge writes each call's inputs into a :class:`Region` (an anonymous
``memfd`` the worker inherits) and the worker writes the outputs back into the
same region. Only small descriptions cross the pipe: the judge's request as a
pickle (the judge is trusted), the worker's reply as JSON that
:func:`decode_outputs` validates field by field before it builds a tensor.
Nothing the worker sends is unpickled or evaluated.

Outputs are zero-copy views of the region, valid until the next call: the
client freezes the worker (``SIGSTOP``) while the judge reads them, so they
cannot change under a check. Copies cost more than the 2 ms budget of a 4 MB
call on these machines (a fresh 4 MB buffer costs ~2 ms in page faults alone).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from dataclasses import dataclass, field
from typing import Any

from pytest_cannbench.timing.raw_memory import copy_into, fill
from pytest_cannbench.workers.memory_plan import REGION_KEEP

ALIGN = 64
MIN_REGION = 1 << 20
MAX_OUTPUTS = 4096
MAX_NDIM = 16
MAX_DIM = 1 << 40  # any single size or stride beyond this is a lie (and would overflow torch's int64 maths)

# The only dtypes a description may name (a fixed table, never getattr(torch, <worker text>)).
DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
               "complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")


def _dtypes() -> dict[str, Any]:
    import torch

    return {name: getattr(torch, name) for name in DTYPE_NAMES if hasattr(torch, name)}


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class OutputProblem:
    """An output the judge cannot turn into a plain tensor; the precision checker reports ``message``."""

    message: str
    type_name: str = "object"


class Region:
    """Judge-owned shared memory, grown on demand; the worker maps the same file descriptor."""

    def __init__(self, size: int = MIN_REGION) -> None:
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("cannbench-region", 0)  # never has a name to leak
        else:  # pragma: no cover - non-Linux
            import tempfile

            fd, path = tempfile.mkstemp(prefix="cannbench-region-", dir="/dev/shm" if os.path.isdir("/dev/shm")
                                        else None)
            os.unlink(path)
            self.fd = fd
        self.size = 0
        self.mm: mmap.mmap | None = None
        self.used = 0  # how far pages may be backed since the last release
        self._faulted: tuple[int, int] | None = None  # (pid, extent) since the last growth or release: faulted()
        self.ensure(size)

    def ensure(self, size: int) -> None:
        """At least ``size`` bytes. The old mapping is dropped, not closed: views of it may still be alive."""
        if size > self.size:
            new = max(_aligned(size), self.size * 3 // 2, MIN_REGION)
            new = (new + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
            os.ftruncate(self.fd, new)
            self.mm = mmap.mmap(self.fd, new)
            self.size = self.used = new  # the worker maps (and faults in) all of it
            self._faulted = None  # a mapping at the old size is not one at this size
        self.used = max(self.used, size)

    def release(self, keep: int = REGION_KEEP) -> int:
        """Give the pages past ``keep`` back to the system (the size stays); returns the bytes released.

        The region grows to the largest case so far, and its pages stayed backed for the whole session: on official
        level 1 the two idle regions held 2 GiB while another case's golden ran. Punching them out between cases
        costs the next large case fresh pages. Views of the released part read zeros (never a fault), and the
        worker's mapping of it is emptied too, so :meth:`unfaulted` tells the client to fault it in again before
        anything is timed there."""
        start = (keep + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        if self.mm is None or start >= self.used:
            return 0
        self.mm.madvise(mmap.MADV_REMOVE, start, self.size - start)
        self.used, self._faulted = start, None
        return self.size - start

    def unfaulted(self, pid: int, extent: int) -> bool:
        """Whether worker ``pid`` may lack backed, mapped pages in the first ``extent`` bytes: it has not
        :meth:`faulted` them in at this size since the last release."""
        was = self._faulted
        return was is None or was[0] != pid or was[1] < extent

    def faulted(self, pid: int, extent: int) -> None:
        """Worker ``pid`` mapped the region at its present size and faulted in its first ``extent`` bytes."""
        self._faulted = (pid, extent)

    def view(self, dtype: Any, shape: list[int], offset: int) -> Any:
        import torch

        numel = 1
        for s in shape:
            numel *= s
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(self.mm, dtype=dtype, count=numel, offset=offset).view(shape)

    def close(self) -> None:
        self.mm = None
        try:
            os.close(self.fd)
        except OSError:
            pass


# ---------------------------------------------------------------- judge: inputs


@dataclass
class CallLayout:
    """Where a call's tensors live in the region: inputs first, then room for the outputs."""

    args: dict[str, Any]  # name -> ("v", value) | ("t", slot) | ("l", [slot | None, ...])
    out_offset: int
    out_capacity: int

    @property
    def size(self) -> int:
        return self.out_offset + self.out_capacity


def _slot(t: Any, offset: int) -> dict[str, Any]:
    return {"dtype": dtype_name(t.dtype), "shape": list(t.shape), "offset": offset,
            "nbytes": t.numel() * t.element_size()}


def _place_args(kwargs: dict[str, Any], offset: int,
                writes: list[tuple[Any, int]]) -> tuple[dict[str, Any], int]:
    """Slots for the tensors of one set of keyword arguments from ``offset`` on; returns the args and the end."""
    import torch

    def place(t: Any) -> dict[str, Any]:
        nonlocal offset
        slot = _slot(t, offset)
        writes.append((t, offset))
        offset = _aligned(offset + slot["nbytes"])
        return slot

    args: dict[str, Any] = {}
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            args[name] = ("t", place(value))
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) or v is None
                                                               for v in value):
            args[name] = ("l", [place(v) if v is not None else None for v in value])
        else:
            args[name] = ("v", value)
    return args, offset


def plan_call(kwargs: dict[str, Any], expected_out_bytes: int) -> tuple[CallLayout, list[tuple[Any, int]]]:
    """Lay out the keyword arguments; returns the layout and the (tensor, offset) pairs to write.

    The output area holds twice the expected outputs (a wrong-shape answer still arrives
    whole and gets the precision checker's usual message) plus 1 MiB.
    """
    writes: list[tuple[Any, int]] = []
    args, offset = _place_args(kwargs, 0, writes)
    capacity = _aligned(2 * expected_out_bytes + (1 << 20))
    return CallLayout(args=args, out_offset=offset, out_capacity=capacity), writes


@dataclass
class BatchLayout:
    """Several input sets, then one output area per call: a timing batch in one request."""

    sets: list[dict[str, Any]]  # the args of each input set
    calls: list[CallLayout]  # per call: its set's args and its own output area
    size: int
    set_writes: list[list[tuple[Any, int]]] = field(default_factory=list)  # per set: its (tensor, offset) pairs


def plan_batch(kwargs_sets: list[dict[str, Any]], call_sets: list[int],
               expected_out_bytes: int) -> tuple[BatchLayout, list[tuple[Any, int]]]:
    """Input sets first, then an output area for every call (``call_sets[i]`` = the set call i uses).

    Every set has its own slot, so the judge can write a timed set just before its call
    (``layout.set_writes[i]``; a slot not yet written holds whatever an earlier batch left) and
    still compare every set with what it wrote once the batch is over. Every call keeps its
    outputs until the batch is over, so the judge checks all of them after the timed loop instead
    of inside it. An output larger than expected does not fit and is reported as such (a timed
    call has already answered correctly once).
    """
    writes: list[tuple[Any, int]] = []
    offset = 0
    sets, per_set = [], []
    for kwargs in kwargs_sets:
        mine: list[tuple[Any, int]] = []
        args, offset = _place_args(kwargs, offset, mine)
        sets.append(args)
        per_set.append(mine)
        writes += mine
    capacity = _aligned(expected_out_bytes + 4096)
    calls = []
    for index in call_sets:
        calls.append(CallLayout(args=sets[index], out_offset=offset, out_capacity=capacity))
        offset += capacity
    return BatchLayout(sets=sets, calls=calls, size=offset, set_writes=per_set), writes


def write_inputs(region: Region, layout: Any, writes: list[tuple[Any, int]]) -> None:
    """Copy the planned tensors into the region (grown to ``layout.size`` first)."""
    import torch

    region.ensure(layout.size)
    for t, offset in writes:
        n = t.numel() * t.element_size()
        if n:
            src = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            torch.frombuffer(region.mm, dtype=torch.uint8, count=n, offset=offset).copy_(src)


# ---------------------------------------------------------------- worker: both directions


def read_args(region_mm: Any, args: dict[str, Any], device: str) -> dict[str, Any]:
    """The worker's view of the judge's arguments: tensors backed by the region (moved if not on CPU)."""
    import torch

    dtypes = _dtypes()

    def tensor(slot: dict[str, Any]) -> Any:
        numel = 1
        for s in slot["shape"]:
            numel *= s
        dtype = dtypes[slot["dtype"]]
        if numel == 0:
            t = torch.empty(slot["shape"], dtype=dtype)
        else:
            t = torch.frombuffer(region_mm, dtype=dtype, count=numel, offset=slot["offset"]).view(slot["shape"])
        return t if device == "cpu" else t.to(device)

    out: dict[str, Any] = {}
    for name, (kind, value) in args.items():
        if kind == "t":
            out[name] = tensor(value)
        elif kind == "l":
            out[name] = [tensor(v) if v is not None else None for v in value]
        else:
            out[name] = value
    return out


def flatten(result: Any) -> list[Any]:
    """A tuple or list of outputs (one TensorList level flattened), like the golden's outputs."""
    items = list(result) if isinstance(result, (list, tuple)) else [result]
    flat: list[Any] = []
    for item in items:
        flat.extend(item if isinstance(item, (list, tuple)) else [item])
    return flat


def _storage_span(t: Any) -> tuple[int, int]:
    """The bytes of memory a tensor's storage covers, read through TensorBase (not overridable per instance)."""
    import torch

    storage = torch._C.TensorBase.untyped_storage(t)
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def _instance_attributes(t: Any) -> list[str]:
    try:
        return sorted(object.__getattribute__(t, "__dict__"))
    except (AttributeError, TypeError):
        return []


# ---------------------------------------------------------------- worker: where an output's memory came from

@dataclass(frozen=True)
class StorageProbe:
    """Where torch's allocator of one device type leaves its mark in a storage: the words of a ``StorageImpl``
    (read from ``storage._cdata``) holding the data pointer, the deleter and its context.

    Found by calibration on storages the allocator itself made, before any submission code runs, so it follows
    the installed torch's layout instead of assuming one. A storage whose deleter is not the allocator's was not
    allocated by it: ``from_blob`` over memory of the submission's (mapped on first touch, filled by its own fault
    handler) or a deleter of its own that does work after the call (:func:`foreign_storage`)."""

    data_word: int
    deleter_word: int
    ctx_word: int  # -1: the allocator's context is not the data pointer
    deleter: int


_WORDS = 16
_PROBES: dict[str, StorageProbe] = {}
# Read through memmove into a buffer made now: the guard's audit hook refuses new ctypes objects after the import.
_WORD_BUFFER = (ctypes.c_uint64 * _WORDS)()
_WORD_ADDRESS = ctypes.addressof(_WORD_BUFFER)


def _storage_words(storage: Any) -> list[int]:
    ctypes.memmove(_WORD_ADDRESS, int(storage._cdata), 8 * _WORDS)
    return list(_WORD_BUFFER)


def calibrate_storage_probe(device: str) -> str:
    """Learn the allocator's mark for ``device`` (its type) from storages it made; the worker's log line."""
    import torch

    kind = device.split(":")[0]
    refs = [torch.empty(n, dtype=torch.uint8, device=device) for n in (64, 1 << 16, 1 << 22)]
    words = [(_storage_words(t.untyped_storage()), t.untyped_storage().data_ptr()) for t in refs]
    first, data = words[0]
    for k in range(_WORDS - 2):
        if first[k] != data or not all(w[k] == d for w, d in words):
            continue
        slots = (k + 1, k + 2)
        for deleter_word in slots:
            if first[deleter_word] and all(w[deleter_word] == first[deleter_word] for w, _ in words):
                other = slots[1] if deleter_word == slots[0] else slots[0]
                ctx = other if all(w[other] == d for w, d in words) else -1
                _PROBES[kind] = StorageProbe(k, deleter_word, ctx, first[deleter_word])
                return f"{kind} storages checked against the allocator's deleter (word {deleter_word})"
    return f"{kind} storages checked by resizability only (the allocator's mark was not found)"


def foreign_storage(t: Any) -> str | None:
    """Why ``t``'s memory was not allocated by torch's allocator for its device, or None."""
    import torch

    storage = torch._C.TensorBase.untyped_storage(t)
    if storage.nbytes() == 0:
        return None
    probe = _PROBES.get(t.device.type)
    if probe is None:  # uncalibrated: from_blob storages at least are never resizable
        return None if storage.resizable() else "its storage wraps memory torch did not allocate (from_blob)"
    words = _storage_words(storage)
    data = storage.data_ptr()
    if words[probe.data_word] != data:
        return "its storage is not laid out as torch's"
    if words[probe.deleter_word] != probe.deleter or (probe.ctx_word >= 0 and words[probe.ctx_word] != data):
        return "its storage has a deleter of its own (memory from from_blob, a custom allocator or a mapping)"
    return None


def poison(outputs: list[Any], descriptions: list[dict[str, Any]]) -> None:
    """Overwrite the candidate's own output tensors once copied out: a cached tensor returned again is garbage.

    Only outputs that passed the contract: one that aliases an input is reported as such, and poisoning
    it would rewrite the judge's copy of that input.
    """
    import torch

    for value, desc in zip(outputs, descriptions):
        if desc.get("kind") != "tensor":
            continue
        if type(value) is torch.Tensor and value.layout == torch.strided and value.numel():
            base = torch._C.TensorBase
            if (value.device.type == "cpu" and value.dtype != torch.bool and base.is_contiguous(value)):
                # libc memset (timing/raw_memory.py): all-ones bytes are NaN in every float format
                fill(value, 0xFF if value.is_floating_point() or value.is_complex() else 0x4D)
                continue
            try:
                if value.is_floating_point() or value.is_complex():
                    torch._C.TensorBase.fill_(value, float("nan"))
                elif value.dtype != torch.bool:
                    torch._C.TensorBase.fill_(value, 77)
            except RuntimeError:  # an expanded (self-overlapping) view: flagged elsewhere
                pass


# Storages of outputs already returned, while something (the submission's cache) keeps them alive: torch keeps
# one Python object per live storage, so a weak set tells "the same buffer again" from "a new buffer at a
# recycled address".
_EARLIER_OUTPUTS: weakref.WeakSet[Any] = weakref.WeakSet()
EARLIER_OUTPUT = "an earlier call's output"


def write_outputs(region_mm: Any, region_size: int, outputs: list[Any], out_offset: int, out_capacity: int,
                  inputs: dict[str, Any] | None = None, allocated_by_torch: bool = False) -> list[dict[str, Any]]:
    """Describe each output and copy the plain contiguous tensors that fit into the output area.

    The output contract is checked here, before any value is read: a plain ``torch.Tensor``
    (no subclass, no instance attributes), strided, and sharing no memory with an input; with
    ``allocated_by_torch`` (submissions), in memory torch's allocator made (:func:`foreign_storage`).
    """
    import torch

    spans = []
    for name, value in (inputs or {}).items():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, torch.Tensor) and v.numel():
                spans.append((name, _storage_span(v)))
    descriptions: list[dict[str, Any]] = []
    offset, end = out_offset, min(out_offset + out_capacity, region_size)
    for value in outputs[:MAX_OUTPUTS]:
        if value is None:
            descriptions.append({"kind": "none"})
            continue
        if type(value) is not torch.Tensor:
            kind = "subclass" if isinstance(value, torch.Tensor) else "object"
            descriptions.append({"kind": kind, "type": type(value).__name__})
            continue
        attrs = _instance_attributes(value)
        if attrs:
            descriptions.append({"kind": "attrs", "names": attrs[:10]})
            continue
        if value.layout != torch.strided:
            descriptions.append({"kind": "layout", "layout": str(value.layout)})
            continue
        if value.numel():
            lo, hi = _storage_span(value)
            shared = [name for name, (a, b) in spans if lo < b and a < hi]
            if shared:
                descriptions.append({"kind": "alias", "inputs": shared[:10]})
                continue
        if allocated_by_torch and value.numel() and (why := foreign_storage(value)) is not None:
            descriptions.append({"kind": "storage", "reason": why})
            continue
        storage = torch._C.TensorBase.untyped_storage(value)
        if storage in _EARLIER_OUTPUTS:  # the same storage, still alive since an earlier call returned it
            descriptions.append({"kind": "alias", "inputs": [EARLIER_OUTPUT]})
            continue
        _EARLIER_OUTPUTS.add(storage)
        t = value.detach()
        entry: dict[str, Any] = {"kind": "tensor", "dtype": dtype_name(t.dtype), "shape": list(t.shape),
                                 "stride": list(t.stride()), "device": str(t.device), "offset": offset,
                                 "nbytes": t.numel() * t.element_size(), "written": False}
        if entry["nbytes"] and offset + entry["nbytes"] <= end:
            src = (t if t.device.type == "cpu" else t.cpu()).resolve_conj().resolve_neg().contiguous()
            # libc, not a torch copy: the judge's sampler would count a torch copy as the submission's builtin
            # compute (timing/raw_memory.py)
            copy_into(region_mm, offset, src)
            entry["written"] = True
            offset = _aligned(offset + entry["nbytes"])
        elif not entry["nbytes"]:
            entry["written"] = True
        descriptions.append(entry)
    return descriptions


# ---------------------------------------------------------------- judge: outputs


def _names(value: Any) -> str:
    """Names the worker listed, cut to size (its text, shown to people, never evaluated)."""
    return ", ".join(str(n)[:40] for n in value[:10]) if isinstance(value, list) else ""


def _int_list(value: Any, limit: int) -> list[int] | None:
    if not isinstance(value, list) or len(value) > limit:
        return None
    if not all(type(v) is int for v in value):
        return None
    return value


def decode_outputs(descriptions: Any, region: Region, layout: CallLayout, device: str) -> list[Any]:
    """Tensors (views of the region), None, or :class:`OutputProblem` for each described output.

    Every field is checked before use: the description comes from the submission's process.
    """
    if not isinstance(descriptions, list) or len(descriptions) > MAX_OUTPUTS:
        return [OutputProblem("the candidate worker sent an invalid output list")]
    dtypes = _dtypes()
    lo, hi = layout.out_offset, min(layout.out_offset + layout.out_capacity, region.size)
    out: list[Any] = []
    for d in descriptions:
        out.append(_decode_one(d, region, dtypes, lo, hi, device))
    return out


def _decode_one(d: Any, region: Region, dtypes: dict[str, Any], lo: int, hi: int, device: str) -> Any:
    import torch

    if not isinstance(d, dict):
        return OutputProblem("the candidate worker sent an invalid output description")
    kind = d.get("kind")
    if kind == "none":
        return None
    if kind == "object":
        type_name = str(d.get("type"))[:80]
        return OutputProblem(f"expected a torch.Tensor, got {type_name}", type_name)
    if kind == "subclass":
        type_name = str(d.get("type"))[:80]
        return OutputProblem(f"output is a {type_name} (a torch.Tensor subclass); return a plain torch.Tensor",
                             type_name)
    if kind == "layout":
        return OutputProblem(f"output layout {str(d.get('layout'))[:40]} is not torch.strided", "Tensor")
    if kind == "attrs":
        return OutputProblem(f"output carries instance attributes ({_names(d.get('names'))}); return a plain "
                             "torch.Tensor", "Tensor")
    if kind == "storage":
        return OutputProblem(f"output's memory was not allocated by torch ({str(d.get('reason'))[:160]}); return a "
                             "tensor torch allocated (torch.empty, at::empty)", "Tensor")
    if kind == "alias":
        names = d.get("inputs")
        if names == [EARLIER_OUTPUT]:
            return OutputProblem(f"output is the storage of {EARLIER_OUTPUT}, kept and returned again; return a "
                                 "new tensor per call", "Tensor")
        return OutputProblem(f"output shares memory with input {_names(names)}; return a new tensor", "Tensor")
    if kind != "tensor":
        return OutputProblem("the candidate worker sent an output of unknown kind")
    dtype = dtypes.get(dtype_key) if isinstance(dtype_key := d.get("dtype"), str) else None
    shape, stride = _int_list(d.get("shape"), MAX_NDIM), _int_list(d.get("stride"), MAX_NDIM)
    offset, nbytes = d.get("offset"), d.get("nbytes")
    if (dtype is None or shape is None or stride is None or len(stride) != len(shape)
            or any(not 0 <= s <= MAX_DIM for s in shape) or any(abs(st) > MAX_DIM for st in stride)
            or type(offset) is not int or type(nbytes) is not int):
        return OutputProblem("the candidate worker sent an invalid tensor description")
    numel, span = 1, 1
    for s in shape:
        numel *= s
        span *= max(s, 1)
    if span > MAX_DIM:  # even an empty tensor must have a shape torch can describe
        return OutputProblem("the candidate worker sent an invalid tensor description")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if nbytes != numel * itemsize:
        return OutputProblem("the candidate worker sent an inconsistent tensor description")
    where = str(d.get("device"))[:40]
    if where.split(":")[0] != device.split(":")[0]:
        return OutputProblem(f"output is on device {where}; expected {device}", "Tensor")
    if not d.get("written"):
        return OutputProblem(f"output of shape {tuple(shape)} and dtype {d.get('dtype')} "
                             f"({nbytes} bytes) is far larger than the expected outputs", "Tensor")
    if nbytes and not (lo <= offset and offset + nbytes <= hi):
        return OutputProblem("the candidate worker sent an output outside its area", "Tensor")
    contiguous = region.view(dtype, shape, offset) if nbytes else torch.empty(shape, dtype=dtype)
    if numel == 0 or _is_contiguous(shape, stride):
        return contiguous
    # Rebuild the candidate's layout so the checker reports it in its usual order (shape, dtype, then layout).
    span = 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride)) if numel else 0
    if any(st < 0 for st in stride) or span > 2 * numel + 64:
        return OutputProblem(f"output is not contiguous (shape {tuple(shape)}, stride {tuple(stride)})", "Tensor")
    try:
        rebuilt = torch.empty_strided(shape, stride, dtype=dtype)
        rebuilt.copy_(contiguous)
    except RuntimeError:  # overlapping strides (an expanded view): no plain tensor has this layout
        return OutputProblem(f"output is not contiguous (shape {tuple(shape)}, stride {tuple(stride)})", "Tensor")
    return rebuilt


def _is_contiguous(shape: list[int], stride: list[int]) -> bool:
    expected = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if size != 1 and st != expected:
            return False
        expected *= size
    return True
