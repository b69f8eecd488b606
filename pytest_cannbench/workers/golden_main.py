"""The golden worker: a subprocess that runs task goldens for the judge.

Goldens are trusted but heavy: fp64 references of attention or convolutions
can take minutes or exhaust memory. Running them here, under an address-space
limit and a judge-side timeout, turns such a golden into one ``golden_error``
case instead of a dead pytest process. Protocol: one request frame in, one
response frame out (see :mod:`wire`); stdout is reserved for frames, anything
a golden prints goes to stderr, which the judge keeps in a log file.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import traceback
from pathlib import Path
from typing import Any

from pytest_cannbench import procs
from pytest_cannbench.kernelbench.problem import prepare as prepare_problem
from pytest_cannbench.phases import PhaseClock
from pytest_cannbench.taskformat.dtypes import DTYPE_INFO
from pytest_cannbench.taskformat.generate import generate_inputs
from pytest_cannbench.taskformat.inputs import plan_inputs
from pytest_cannbench.workers import input_file, limits, wire
from pytest_cannbench.workers.golden_binding import (
    bind,
    call_get_input,
    call_get_output,
    flatten_outputs,
    load_golden,
    upcast,
)
from pytest_cannbench.workers.ranks_main import NPU_MODULE, needs_npu
from pytest_cannbench.workers.ranks_main import mc2_prepare as prepare_rank

# Inputs and results smaller than this go through the pipe: a file's fixed cost (made, written, mapped, removed:
# 1-2 ms either way) is more than pickling them, and a timed case asks for tens of small sets (Round 9 of
# docs/performance.md). Larger ones go through files, never whole through the pipe (see _to_file).
PIPE_BYTES = 1 << 20


def _clone(values: list[Any]) -> list[Any]:
    import torch

    def one(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.clone()
        if isinstance(v, list):
            return [one(x) for x in v]
        return v

    return [one(v) for v in values]


def _is_oom(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, MemoryError) or "can't allocate memory" in text or "out of memory" in text.lower()


def _error(stage: str, exc: BaseException) -> dict[str, Any]:
    """An error reply for ``stage``, naming the golden's line and saying whether it ran out of memory."""
    tb = traceback.extract_tb(exc.__traceback__)
    golden_frames = [f for f in tb if f.filename.endswith(("golden.py",))]
    where = f" at {golden_frames[-1].filename}:{golden_frames[-1].lineno}" if golden_frames else ""

    return {"ok": False, "stage": stage, "oom": _is_oom(exc),
            "error": f"{stage}: {type(exc).__name__}: {exc}{where}", "needs": NPU_MODULE if needs_npu(exc) else "",
            "traceback": "".join(traceback.format_exception(exc))[-4000:]}


def prepare(req: dict[str, Any]) -> dict[str, Any]:
    """Inputs, binding, fp64 truth and same-precision reference for one case.

    With ``like`` (``golden_binding.describe`` of the same case's native outputs on another input set: a timed
    set, the second correctness pass) the reference is not run when the golden's outputs have the described
    shapes: the golden is rounded to the described dtypes, and the judge asks again, in full, only for a verdict
    that the relative errors alone do not pass (``native_deferred``)."""
    clock = PhaseClock()
    stage = "import golden.py"
    try:
        gm = load_golden(Path(req["op_dir"]), req["rel_path"], req["function_name"], req["name_lower"],
                         str(req.get("golden_sha256") or ""))
        stage = "generate inputs"
        with clock.phase("inputs"):
            raw = req["case"]
            plans = plan_inputs(req["input_names"], raw["input_shape"], raw["dtype"], raw.get("value_range"))
            attrs = dict(raw.get("attrs") or {})
            hooked = None
            # generic inputs go straight into the judge's file, never whole in this process (before any golden
            # runs: one that writes into its inputs changes nothing the judge sees); else generated here
            # inputs this small are cheaper to generate again in the judge than to pass through a file
            shared_file = req.get("inputs_file") if planned_bytes(plans) >= PIPE_BYTES else None
            inputs_layout = _generate_into(shared_file, req, plans) if gm.get_input is None else None
            if inputs_layout is not None:
                inputs = input_file.view(req["inputs_file"], inputs_layout)
            else:
                inputs = generate_inputs(plans, req["seed"], dist=req["dist"], compat=req["compat"])
            if gm.get_input is not None:
                stage = "get_input"
                inputs = call_get_input(gm.get_input, req["input_names"], inputs, attrs)
                hooked = inputs
            stage = "bind parameters"
            binding = bind(gm.main, inputs, attrs)
        if hooked is None and inputs_layout is None and shared_file:
            stage = "hand the inputs to the judge"
            with clock.phase("reply"):  # before the golden runs: one that writes into its inputs changes nothing
                inputs_layout = _share_inputs(shared_file, inputs)
        # once in the file, the worker reads its inputs from there: no second copy beside the fp64 one
        kept: list[Any] | None = None if inputs_layout is not None else inputs
        del inputs

        stage = "golden (oracle)" if gm.oracle else "golden"
        truth = gm.oracle or gm.main
        with clock.phase("golden"):
            mine = _own_inputs(kept, shared_file, inputs_layout)
            truth_inputs = upcast(mine) if req["precision"] == "fp64_cpu" else _clone(mine)
            if kept is None:  # nothing the golden gets may hold the file's mapping (upcast passes integers)
                truth_inputs = _clone_views(truth_inputs, mine)
            del mine  # the file's pages go back to the page cache before the golden allocates
            golden = flatten_outputs(truth(**bind(truth, truth_inputs, attrs).kwargs(truth_inputs)))
            del truth_inputs
    except BaseException as exc:  # noqa: BLE001 - every golden failure becomes a report
        return _error(stage, exc)

    native, native_error, deferred = None, None, False
    with clock.phase("native"):
        if req["precision"] == "native_cpu":
            native = golden
        elif gm.get_output is None and shaped_like(golden, req.get("like")):
            golden, deferred = truncate_to_described(golden, req["like"]), True
        else:
            ref = gm.bench or gm.main
            try:
                # a copy only where the inputs are needed afterwards (hook-made ones go to the judge): the
                # judge has its own copy of generic inputs (the file written before any golden ran, or
                # regenerated), so a golden writing into these changes nothing
                native_inputs = (_clone(hooked) if hooked is not None
                                 else _own_inputs(kept, shared_file, inputs_layout))
                native = flatten_outputs(ref(**bind(ref, native_inputs, attrs).kwargs(native_inputs)))
                del native_inputs
            except BaseException as exc:  # noqa: BLE001 - a missing reference only makes the check strict
                native_error = _error("same-precision reference", exc)["error"]
        if native is not None and gm.get_output is None:
            golden = truncate_to_reference(golden, native)
    seconds = clock.seconds
    return {"ok": True, "binding": binding.entries, "hooked": hooked, "golden": golden, "native": native,
            "native_error": native_error, "has_get_output": gm.get_output is not None, "seconds": seconds,
            "inputs_layout": inputs_layout, "native_deferred": deferred}


def _clone_views(values: list[Any], mapped: list[Any]) -> list[Any]:
    """``values`` with every tensor that is one of ``mapped``'s own (upcast returns integers and bools as they
    are) copied, so that dropping ``mapped`` unmaps the file."""
    import torch

    own = {id(t) for v in mapped for t in (v if isinstance(v, list) else [v]) if isinstance(t, torch.Tensor)}

    def one(v: Any) -> Any:
        if isinstance(v, list):
            return [one(x) for x in v]
        return v.clone() if isinstance(v, torch.Tensor) and id(v) in own else v

    return [one(v) for v in values]


def _own_inputs(inputs: list[Any] | None, path: str | None, layout: list[Any] | None) -> list[Any]:
    """The worker's inputs: its own list, or, once they went into the judge's file, a copy-on-write mapping of
    that file (input_file.view), held only while a phase reads it. For the largest official level-1 case
    (298 M elements) that keeps 1.2 GB of native inputs out of the worker's peak beside their fp64 copies."""
    if inputs is not None:
        return inputs
    assert path is not None and layout is not None
    return input_file.view(path, layout)


def planned_bytes(plans: list[Any]) -> int:
    """The native bytes of the inputs ``plans`` describe (``taskformat.inputs.plan_inputs``); an input of a dtype
    outside the project's vocabulary counts as large (it is the file's to refuse)."""
    return sum(t.nbytes if t.dtype in DTYPE_INFO else PIPE_BYTES for plan in plans for t in plan.tensors)


def payload_bytes(value: Any) -> int:
    """The bytes of the tensors in a response (nested lists and dicts)."""
    if isinstance(value, dict):
        return sum(payload_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(payload_bytes(v) for v in value)
    nbytes = getattr(value, "nbytes", None)
    return nbytes if isinstance(nbytes, int) else 0


def _generate_into(path: str | None, req: dict[str, Any], plans: list[Any]) -> list[Any] | None:
    """The case's inputs generated into the judge's inputs file (``input_file.generate``); their layout, or None
    where there is no file or they cannot go through one (then they are generated in memory, as before)."""
    if not path:
        return None
    try:
        return input_file.generate(path, plans, req["seed"], dist=req["dist"], compat=req["compat"])
    except OSError:
        return None


def _share_inputs(path: str, inputs: list[Any]) -> list[Any] | None:
    """The generated inputs into ``path`` for the judge (workers/input_file.py); None when they cannot go
    through a file (the disk is full, an unusual input): the judge then generates its own copy, as before."""
    try:
        return input_file.write(path, inputs)
    except OSError:
        return None


def truncate_to_reference(golden: list[Any], native: list[Any]) -> list[Any]:
    """The fp64 truth rounded to each output's expected dtype (the reference's).

    The precision standard only ever reads the golden truncated to the candidate's dtype, and a
    candidate whose dtype differs from the reference's fails structurally before any number is
    read, so this loses nothing, and it makes what crosses the pipe and lands in the cache 2-4x
    smaller (71 GB for the official tree in fp64). Integer and bool outputs are left as they are.
    """
    import torch

    return _round_to(golden, [(n.dtype, n.shape) if isinstance(n, torch.Tensor) else None for n in native])


def shaped_like(golden: list[Any], like: list[Any] | None) -> bool:
    """The golden's outputs have the count and shapes ``like`` (another input set of the same case) describes,
    so :func:`truncate_to_described` rounds them as :func:`truncate_to_reference` would with the native outputs."""
    import torch

    return (like is not None and len(like) == len(golden)
            and all(isinstance(g, torch.Tensor) and list(g.shape) == shape for g, (_, shape) in zip(golden, like)))


def truncate_to_described(golden: list[Any], like: list[Any]) -> list[Any]:
    """:func:`truncate_to_reference` against described outputs (``golden_binding.describe``), not computed ones."""
    import torch

    return _round_to(golden, [(getattr(torch, dtype), torch.Size(shape)) for dtype, shape in like])


def _round_to(golden: list[Any], targets: list[Any]) -> list[Any]:
    """Each floating golden output cast to its target's floating dtype, where the target, ``(dtype, shape)`` or
    None, has the output's shape: the one rule of both truncations."""
    import torch

    out = []
    for g, target in zip(golden, targets):
        if target is not None and isinstance(g, torch.Tensor) and g.is_floating_point():
            dtype, shape = target
            if dtype.is_floating_point and g.shape == shape and dtype != g.dtype:
                g = g.to(dtype)
        out.append(g)
    return out + golden[len(out):]


def postprocess(req: dict[str, Any]) -> dict[str, Any]:
    """``get_output`` applied to each output list (golden, native, candidate) alike."""
    try:
        gm = load_golden(Path(req["op_dir"]), req["rel_path"], req["function_name"], req["name_lower"],
                         str(req.get("golden_sha256") or ""))
        assert gm.get_output is not None  # only asked of a golden whose prepare reported has_get_output
        out = {}
        for key, outputs in req["outputs"].items():
            out[key] = None if outputs is None else call_get_output(gm.get_output, outputs, req["output_names"],
                                                                    dict(req["attrs"] or {}))
        return {"ok": True, "outputs": out}
    except BaseException as exc:  # noqa: BLE001
        return _error("get_output", exc)


def kernelbench_prepare(req: dict[str, Any]) -> dict[str, Any]:
    """A KernelBench reference run (the problem's Model is trusted task code, like a golden)."""
    return prepare_problem(req)


def mc2_prepare(req: dict[str, Any]) -> dict[str, Any]:
    """One rank of a multi-rank case's distributed golden (workers/ranks_main.py)."""
    return prepare_rank(req)


HANDLERS = {"prepare": prepare, "postprocess": postprocess, "kb_prepare": kernelbench_prepare,
            "mc2_prepare": mc2_prepare, "ping": lambda req: {"ok": True, "pid": os.getpid()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memory-bytes", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--judge-pid", type=int, default=0)
    args = parser.parse_args(argv)
    procs.die_with_parent(args.judge_pid)  # before torch's import: a SIGKILLed judge leaves no golden computing
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)
    if args.memory_bytes > 0:
        limits.clamp_rlimit(resource.RLIMIT_AS, args.memory_bytes)  # never above what we inherited
    procs.become_expendable()
    out = procs.take_stdout_for_frames()  # whatever goldens print lands on stderr, the judge's log
    in_fd = 0
    while True:
        try:
            req = wire.receive(in_fd)
        except wire.PeerClosed:
            procs.exit_now()
        if req.get("op") == "exit":
            procs.exit_now()
        handler = HANDLERS.get(req.get("op"))
        response = handler(req) if handler else {"ok": False, "error": f"unknown request {req.get('op')!r}"}
        try:
            wire.send(out, _to_file(response, req.get("reply_file"), bool(req.get("reply_keep")))
                      if response.get("ok") else response)
        except BaseException as exc:  # noqa: BLE001 - e.g. an output that cannot be pickled
            wire.send(out, _error("send result", exc))
        del response
        procs.give_back_freed_memory()  # idle between cases, as the memory plan counts it


def _to_file(response: dict[str, Any], path: str | None, keep: bool = False) -> dict[str, Any]:
    """Large results go through a file, not the pipe (small ones, under ``PIPE_BYTES``, through the pipe, unless
    the file is to be kept: a golden-cache entry).

    Pickling a response holds a second full copy of every tensor in memory, which under the
    address-space budget failed goldens that had themselves fitted (official cummin, unique,
    moe_re_routing). ``torch.save`` streams each storage to disk instead, and the judge maps the
    file back. When the judge names a cache entry as the file, this write is also the cache store.
    """
    if not path or (not keep and payload_bytes(response) < PIPE_BYTES):
        return response
    import torch

    # No zip CRC-32 of every storage (torch >= 2.5): it was a quarter of the write. The judge maps the file
    # (``torch.load(mmap=True)``), which never checks it, and so does a golden-cache read.
    set_crc32 = getattr(torch.serialization, "set_crc32_options", None)
    if set_crc32 is not None:
        set_crc32(False)
    tmp = f"{path}.tmp-{os.getpid()}"
    clock = PhaseClock()
    try:
        with clock.phase("reply"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            torch.save(response, tmp)
            os.replace(tmp, path)
    except (OSError, RuntimeError):  # disk full or unwritable (torch.save's writer raises RuntimeError): the
        try:                          # partial file goes, and the pipe still works
            os.unlink(tmp)
        except OSError:
            pass
        return response
    return {"ok": True, "reply_file": path, "seconds": clock.seconds}  # the write's cost, beside the file


if __name__ == "__main__":
    sys.exit(main())
