"""Containment and guard parts tested on their own: the seccomp filter in a real process, the symbol scan on
real compiled objects, the op-tree rule on recorded traces, the journal's tamper check on a real file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_cannbench import outcome as oc
from pytest_cannbench.guard import builtin_ops, torch_imports
from pytest_cannbench.guard import runtime as guard
from pytest_cannbench.guard.elf_symbols import scan_libraries, undefined_symbols
from pytest_cannbench.report.journal import Journal

PROBE = textwrap.dedent("""
    import ctypes, json, os, socket, subprocess, sys, threading
    from pytest_cannbench.guard import containment
    status = containment.install_filter()
    out = {"status": status}
    def attempt(name, fn):
        try:
            fn()
            out[name] = "allowed"
        except OSError as exc:
            out[name] = exc.errno
    def fork():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    attempt("fork", fork)
    attempt("subprocess", lambda: subprocess.run(["true"], check=False))
    attempt("thread", lambda: [t.start() or t.join() for t in [threading.Thread(target=lambda: None)]])
    attempt("signal_parent", lambda: os.kill(os.getppid(), 0))
    attempt("signal_self", lambda: os.kill(os.getpid(), 0))
    attempt("inet_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
    attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close())
    libc = ctypes.CDLL(None, use_errno=True)
    out["ptrace_parent"] = libc.ptrace(16, os.getppid(), 0, 0) == -1 and ctypes.get_errno()  # PTRACE_ATTACH
    print(json.dumps(out))
""")


def test_seccomp_filter_in_a_real_process():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if not out["status"].startswith("on"):
        pytest.skip(f"seccomp is not available here: {out['status']}")
    assert out["fork"] == 1 and out["subprocess"] == 1  # EPERM: no new processes
    assert out["thread"] == "allowed"  # threads are not processes
    assert out["signal_parent"] == 1 and out["signal_self"] == "allowed"
    assert out["inet_socket"] == 13 and out["unix_socket"] == "allowed"  # EACCES: no network
    assert out["ptrace_parent"] == 1


def test_op_tree_rule_on_a_recorded_trace():
    """Events as the profiler records them: (name, start, end, is_user_annotation)."""
    events = [(guard.MARK, 100, 900, True), ("cann_bench::softplus", 110, 880, False),
              ("aten::empty_like", 120, 130, False), ("aten::empty_strided", 121, 129, False),
              ("aten::exp", 200, 300, False),  # called by the custom op's C++ through the dispatcher
              ("user_label", 400, 410, True),  # the submission's own annotation: ignored
              ("aten::add_", 950, 990, False),  # outside the call (the judge's cache flush): ignored
              (guard.MARK, 1000, 1100, True), ("aten::sigmoid", 1010, 1090, False)]
    marks, ops = guard.builtin_ops_inside(events)
    assert marks == 2 and ops == ["aten::exp", "aten::sigmoid"]
    assert guard.builtin_ops_inside([e for e in events if e[0] != "aten::exp" and e[0] != "aten::sigmoid"])[1] == []


@pytest.mark.parametrize("op, allowed", [("cann_bench::softplus", True), ("aten::empty_strided", True),
                                         ("aten::copy_", True), ("aten::contiguous", True), ("aten::view", True),
                                         ("aten::exp", False), ("aten::sigmoid", False), ("aten::mm", False),
                                         ("aten::add_.Tensor", False), ("torchvision::nms", False),
                                         ("prims::exp", False)])
def test_allowlist_of_ops(op, allowed):
    assert builtin_ops.is_allowed(op) is allowed


@pytest.mark.parametrize("symbol, forbidden", [
    ("_ZN2at4_ops19empty_memory_format4callEN3c108ArrayRefINS2_6SymIntEEE", False),
    ("_ZN2at4_ops8to_dtype4callERKNS_6TensorEN3c1010ScalarTypeEbbSt8optionalINS5_12MemoryFormatEE", False),
    ("_ZN2at4_ops3exp4callERKNS_6TensorE", True),
    ("_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE", True),
    ("_ZN2at3cpu8softplusERKNS_6TensorERKN3c106ScalarES7_", True),
    ("_ZN2at6native3expERKNS_6TensorE", True),
    ("_ZN2at20enableRecordFunctionEb", True),
    ("_ZN2at4cuda20getCurrentCUDAStreamEa", False),
    ("_ZN3c1010Dispatcher9singletonEv", True),  # a dispatcher lookup reaches builtin kernels by name
    ("_ZNK3c1014OperatorHandle9callBoxedEPSt6vectorINS_6IValueESaIS2_EE", True),
    ("_ZN3c1015SetCPUAllocatorEPNS_9AllocatorEh", True),
    ("_ZN2at3vec3mapEv", True), ("Sleef_expf8_u10", True),
    ("_ZNK2at10TensorBase8data_ptrIfEEPT_v", False),
    ("_ZN3c106detail14torchCheckFailEPKcS2_jS2_", False),
    ("cblas_sgemm", True), ("dlsym", True), ("expf", False), ("GOMP_parallel", False),
])
def test_symbol_policy(symbol, forbidden):
    assert bool(torch_imports.forbidden_symbol(symbol)) is forbidden


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_symbol_scan_of_a_real_shared_object(tmp_path):
    (tmp_path / "k.c").write_text(textwrap.dedent("""
        #include <math.h>
        void cblas_sgemm(void);
        void *dlsym(void *, const char *);
        float mine(float x) { return expf(x); }
        void delegate(void) { cblas_sgemm(); dlsym(0, "sgemm_"); }
    """))
    lib = tmp_path / "pkg" / "libk.so"
    lib.parent.mkdir()
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "k.c"), "-lm"], check=True)
    names = {n.split("@")[0] for n in undefined_symbols(lib)}
    assert {"expf", "cblas_sgemm", "dlsym"} <= names and "mine" not in names
    problems, unreadable = scan_libraries(tmp_path / "pkg")
    assert sorted(p.symbol for p in problems) == ["cblas_sgemm", "dlsym"] and not unreadable
    (tmp_path / "pkg" / "fake.so").write_bytes(b"not an elf")  # files are picked by magic, not by name
    assert not scan_libraries(tmp_path / "pkg")[1]
    (tmp_path / "pkg" / "cut.so").write_bytes(lib.read_bytes()[:200])
    assert scan_libraries(tmp_path / "pkg")[1]


def test_journal_rewritten_when_someone_else_writes_it(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"run": "earlier", "outcome": {"key": "a"}}\n')
    journal = Journal(path, "now")
    journal.append({"key": "level1/x_1", "status": "failed"})
    with open(path, "a") as fh:  # what a submission with file access would do
        fh.write('{"run": "now", "outcome": {"key": "level1/x_1", "status": "passed"}}\n')
    journal.append({"key": "level1/x_2", "status": "passed"})
    journal.close()
    assert journal.tampered
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["run"], e["outcome"].get("status")) for e in lines] == [("earlier", None), ("now", "failed"),
                                                                      ("now", "passed")]
    clean = Journal(path, "later")
    clean.append({"key": "b"})
    clean.close()
    assert not clean.tampered


@pytest.mark.parametrize("mode", ["off", "warn", "block"])
def test_tampering_and_access_fail_the_call_in_every_guard_mode(mode):
    from pytest_cannbench.guard.policy import guard_verdict

    found = [("builtin_compute", "ran builtin op(s) aten::exp"), ("api_tampered", "time.perf_counter was replaced")]
    status, message, flags = guard_verdict(found, mode)
    assert status == "api_tampered" and "time.perf_counter was replaced" in message
    assert flags == ["builtin_compute: ran builtin op(s) aten::exp", "api_tampered: time.perf_counter was replaced"]
    assert guard_verdict([("forbidden_access", "touched /tasks")], mode)[0] == "forbidden_access"
    only_delegation = guard_verdict(found[:1], mode)[0]
    assert only_delegation == ("builtin_compute" if mode == "block" else None)


def test_guard_findings_from_the_worker_are_validated():
    from pytest_cannbench.guard.policy import guard_problems

    reply = {"guard": [{"kind": "builtin_compute", "detail": "x" * 400}, {"kind": "made_up", "detail": "y"},
                       "not a dict", {"kind": "api_tampered"}] + [{"kind": "host_library", "detail": "z"}] * 30}
    found = guard_problems(reply)
    assert found[0] == ("builtin_compute", "x" * 300) and found[1] == ("api_tampered", "")
    assert len(found) == 20 and all(kind in oc.GUARD_FAILURES for kind, _ in found)
    assert guard_problems({"guard": "not a list"}) == [] and guard_problems({}) == []


def test_guard_kinds_have_one_definition_most_serious_first():
    from pytest_cannbench.guard.policy import ALWAYS_DECIDING, guard_verdict

    assert oc.GUARD_FAILURES == ("forbidden_access", "api_tampered", "guard_blinded", "builtin_compute",
                                 "no_custom_kernel", "low_kernel_coverage", "host_library")
    assert set(ALWAYS_DECIDING) <= set(oc.GUARD_FAILURES)
    everything = [(kind, kind) for kind in reversed(oc.GUARD_FAILURES)]
    assert guard_verdict(everything, "block")[0] == oc.GUARD_FAILURES[0]
    assert guard_verdict(everything[:3], "block")[0] == oc.GUARD_FAILURES[-3]


FAULT_PROBE = textwrap.dedent("""
    import ctypes, json, os, signal, sys
    from pytest_cannbench.guard import containment
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)(lambda sig: None)

    class Sigaction(ctypes.Structure):  # x86-64 / AArch64 kernel_sigaction: handler, flags, restorer, mask
        _fields_ = [("handler", ctypes.c_void_p), ("flags", ctypes.c_ulong), ("restorer", ctypes.c_void_p),
                    ("mask", ctypes.c_ulong)]

    def set_handler(sig):  # the raw syscall, as compiled code would make it
        act = Sigaction(ctypes.cast(HANDLER, ctypes.c_void_p).value, 0x04000000, None, 0)
        return "allowed" if libc.syscall(ctypes.c_long(NR["rt_sigaction"]), sig, ctypes.byref(act), None, 8) == 0 \\
            else ctypes.get_errno()

    def query(sig):
        old = Sigaction()
        return "allowed" if libc.syscall(ctypes.c_long(NR["rt_sigaction"]), sig, None, ctypes.byref(old), 8) == 0 \\
            else ctypes.get_errno()

    import platform
    NR = containment._ARCHES[platform.machine()][1]
    out = {"base": containment.install_filter()}
    out["userfaultfd"] = "allowed" if libc.syscall(ctypes.c_long(NR["userfaultfd"]), 0) >= 0 else ctypes.get_errno()
    fd = os.open("/dev/null", os.O_RDONLY)
    out["uffdio_api"] = "allowed" if libc.ioctl(fd, ctypes.c_ulong(0xC018AA3F), None) == 0 else ctypes.get_errno()
    out["other_ioctl"] = ctypes.get_errno() if libc.ioctl(fd, ctypes.c_ulong(0x5401), None) != 0 else "allowed"
    seal = containment.prepare_fault_seal(True)
    out["segv_before"] = set_handler(signal.SIGSEGV)  # at import time a handler may still be set...
    out["fault"] = seal()  # ...and is dropped once the import is over
    old = Sigaction()
    libc.syscall(ctypes.c_long(NR["rt_sigaction"]), signal.SIGSEGV, None, ctypes.byref(old), 8)
    out["dropped"] = old.handler != ctypes.cast(HANDLER, ctypes.c_void_p).value
    out["resethand"] = bool(old.flags & 0x80000000)
    out["segv_after"] = set_handler(signal.SIGSEGV)
    out["bus_after"] = set_handler(signal.SIGBUS)
    out["segv_query"] = query(signal.SIGSEGV)
    out["usr1_after"] = set_handler(signal.SIGUSR1)
    print(json.dumps(out), flush=True)
    ctypes.string_at(16)  # a fault now ends the process (no handler loops on a refused restore)
""")


def test_fault_handlers_and_userfaultfd_refused_in_a_real_process():
    """A page filled by the submission's own code when first touched needs userfaultfd or a fault handler: the
    base filter refuses the first, the post-import one new handlers, and the import's handlers are dropped."""
    done = subprocess.run([sys.executable, "-c", FAULT_PROBE], capture_output=True, text=True, timeout=60,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == -11, (done.returncode, done.stderr[-2000:])  # SIGSEGV, once
    assert done.stderr.count("Segmentation fault") == 1, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if not out["base"].startswith("on"):
        pytest.skip(f"seccomp is not available here: {out['base']}")
    assert out["userfaultfd"] == 1 and out["uffdio_api"] == 1, out  # EPERM
    assert out["other_ioctl"] != 1, out  # ENOTTY on /dev/null: other ioctls pass the filter
    assert out["segv_before"] == "allowed" and "sealed" in out["fault"] and "not" not in out["fault"], out
    assert out["dropped"] and out["resethand"], out
    assert out["segv_after"] == 1 and out["bus_after"] == 1, out
    assert out["segv_query"] == "allowed" and out["usr1_after"] == "allowed", out
