"""The ELF reader as the loader sees a file: by magic number, through PT_DYNAMIC, with or without section
headers, both hash styles; unreadable ELF files are refused in block mode by the build's symbol check; what a
kernel library imports from torch checked against the allowlist (guard/torch_imports.py), on real libraries."""

from __future__ import annotations

import platform
import shutil
import struct
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest
from compiled import compile_library

from pytest_cannbench.guard.elf_symbols import read_imports, scan_libraries, summary, torch_exports
from pytest_cannbench.guard.torch_imports import forbidden_symbol, qualified_name
from pytest_cannbench.outcome import BUILD_OK
from pytest_cannbench.submission.build import SubmissionState, check_symbols

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

SOURCE = textwrap.dedent("""
    #include <math.h>
    void cblas_sgemm(void);
    void *dlsym(void *, const char *);
    float mine(float x) { return expf(x); }
    void delegate(void) { cblas_sgemm(); dlsym(0, "sgemm_"); }
""")


def strip_section_headers(path: Path) -> None:
    """What a submission does to hide from a section-header reader: e_shoff, e_shnum and e_shstrndx zeroed
    (the loader never reads them, so the library still loads)."""
    data = bytearray(path.read_bytes())
    assert data[4] == 2  # 64-bit
    struct.pack_into("<Q", data, 0x28, 0)  # e_shoff
    struct.pack_into("<HH", data, 0x3C, 0, 0)  # e_shnum, e_shstrndx
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("elf")
    (where / "k.c").write_text(SOURCE)
    (where / "blas.c").write_text("void openblas_stub(void) {}\n")
    stub = where / "libopenblas.so.0"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libopenblas.so.0", "-o", str(stub),
                    str(where / "blas.c")], check=True)
    out = {}
    for style in ("gnu", "sysv"):
        lib = where / f"libk-{style}.so"
        subprocess.run(["cc", "-shared", "-fPIC", f"-Wl,--hash-style={style}", "-o", str(lib), str(where / "k.c"),
                        "-lm", "-Wl,--no-as-needed", str(stub)], check=True)
        out[style] = lib
    return out


@pytest.mark.parametrize("style", ["gnu", "sysv"])
def test_dynamic_segment_reads_the_same_without_section_headers(built, style, tmp_path):
    lib = built[style]
    before = read_imports(lib)
    assert {"expf", "cblas_sgemm", "dlsym"} <= {n.split("@")[0] for n in before.undefined}
    assert "mine" not in before.undefined and "libopenblas.so.0" in before.needed
    bare = tmp_path / lib.name
    shutil.copy(lib, bare)
    strip_section_headers(bare)
    after = read_imports(bare)
    assert sorted(after.undefined) == sorted(set(before.undefined)) and after.needed == before.needed


def test_every_elf_counts_whatever_its_name(built, tmp_path):
    pkg = tmp_path / "site" / "cann_bench"
    pkg.mkdir(parents=True)
    shutil.copy(built["gnu"], pkg / "kernel.bin")  # what torch.ops.load_library loads happily
    shutil.copy(built["sysv"], pkg / "data")
    strip_section_headers(pkg / "data")
    (pkg / "notes.so").write_text("not an ELF file, whatever its name")
    problems, unreadable = scan_libraries(tmp_path / "site")
    assert not unreadable
    by_file = {(Path(p.library).name, p.symbol) for p in problems}
    for name in ("kernel.bin", "data"):
        assert {(name, "cblas_sgemm"), (name, "dlsym"), (name, "the library libopenblas.so.0")} <= by_file
    assert all(Path(p.library).name != "notes.so" for p in problems)


@pytest.mark.parametrize("damage", ["truncated", "dynamic_outside"])
def test_an_unreadable_elf_is_a_guard_problem_naming_the_file(built, tmp_path, damage):
    site = tmp_path / "site"
    site.mkdir()
    data = bytearray(built["gnu"].read_bytes())
    if damage == "truncated":
        data = data[:300]
    else:  # program headers pointing past the end of the file
        struct.pack_into("<Q", data, 0x20, len(data) + 4096)
    (site / "_C.cpython-311-x86_64-linux-gnu.so").write_bytes(bytes(data))
    state = SubmissionState(status=BUILD_OK, site_dir=str(site))
    check_symbols(state)
    assert state.scan["symbols"]["unreadable"]
    assert any(kind == "builtin_compute" and "cannot read" in detail and "_C.cpython" in detail
               for kind, detail in state.guard_problems), state.guard_problems


# ------------------------------------------------------------------ what a kernel library may import from torch

EXAMPLE_CSRC = Path(__file__).resolve().parents[2] / "examples" / "cpp_cpu" / "csrc"
GUARD_EVIDENCE = Path(__file__).resolve().parents[1] / "adversarial" / "guard_evidence"

# Torch's names declared, not included: the compiled library imports them with their real mangling, in a
# second, no torch headers needed. Each is (what it reaches, the reason the scan must give, or "" if allowed).
TORCH_NAMES = textwrap.dedent("""
    namespace c10 {
    struct Allocator;
    void SetCPUAllocator(Allocator*, unsigned char);
    struct OperatorName;
    struct OperatorHandle { void callBoxed(void*) const; };
    struct Dispatcher {
      static Dispatcher& realSingleton();
      OperatorHandle findSchemaOrThrow(const char*, const char*);
    };
    namespace detail { void torchCheckFail(const char*, const char*, unsigned, const char*); }
    struct TensorImpl { void incref_pyobject() const; };
    }
    namespace at {
    struct Tensor;
    namespace native { void exp(const Tensor&); }  // return types are not mangled
    namespace vec { void map(); }
    struct RecordFunction { RecordFunction(int); };
    namespace _ops { struct exp { static void call(const Tensor&); };
                     struct empty_memory_format { static void call(int); }; }
    struct TensorBase { template <typename T> T* data_ptr() const; };
    int get_num_threads();
    }
    namespace torch {
    namespace jit { void parseSchema(const char*, bool); void runGraph(); }
    namespace profiler { void enableProfiler(); }
    struct Library { void _impl(const char*); };
    }
    extern "C" { float Sleef_expf8_u10(float); void sgetrf_(); float expf(float); }
    void use(void* p) {
      c10::SetCPUAllocator(nullptr, 0);
      c10::Dispatcher::realSingleton().findSchemaOrThrow("aten::exp", "").callBoxed(p);
      c10::detail::torchCheckFail("", "", 0, "");
      static_cast<c10::TensorImpl*>(p)->incref_pyobject();
      at::native::exp(*static_cast<at::Tensor*>(p));
      at::vec::map();
      at::RecordFunction r(0);
      at::_ops::exp::call(*static_cast<at::Tensor*>(p));
      at::_ops::empty_memory_format::call(0);
      static_cast<at::TensorBase*>(p)->data_ptr<float>();
      at::get_num_threads();
      torch::jit::parseSchema("", true);
      torch::jit::runGraph();
      torch::profiler::enableProfiler();
      static_cast<torch::Library*>(p)->_impl("");
      Sleef_expf8_u10(expf(1.f));
      sgetrf_();
    }
""")
EXPECTED = {
    "c10::SetCPUAllocator": "replaces torch's allocator",
    "c10::Dispatcher::realSingleton": "a dispatcher lookup",
    "c10::Dispatcher::findSchemaOrThrow": "a dispatcher lookup",
    "c10::OperatorHandle::callBoxed": "a dispatcher lookup",
    "at::native::exp": "an ATen kernel called directly", "at::vec::map": "an ATen kernel called directly",
    "at::RecordFunction::RecordFunction": "control of the profiler's op recording",
    "torch::profiler::enableProfiler": "control of the profiler's op recording",
    "at::_ops::exp::call": "the builtin op aten::exp", "torch::jit::runGraph": "torch internals outside",
    "Sleef_expf8_u10": "Sleef", "sgetrf_": "torch internals outside",  # LAPACK: found among torch's exports
    "c10::detail::torchCheckFail": "", "c10::TensorImpl::incref_pyobject": "",
    "at::_ops::empty_memory_format::call": "", "at::TensorBase::data_ptr": "", "at::get_num_threads": "",
    "torch::jit::parseSchema": "", "torch::Library::_impl": "", "expf": "",
}


@pytest.fixture(scope="module")
def torch_names(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("names")
    (where / "names.cpp").write_text(TORCH_NAMES)
    lib = where / "site" / "libnames.so"
    lib.parent.mkdir()
    subprocess.run(["c++", "-shared", "-fPIC", "-O0", "-o", str(lib), str(where / "names.cpp")], check=True)
    return lib


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_torch_imports_are_an_allowlist(torch_names):
    problems, unreadable = scan_libraries(torch_names.parent)
    assert not unreadable
    found = {p.name: p.reason for p in problems}
    for name, reason in EXPECTED.items():
        if name == "sgetrf_" and name not in torch_exports():  # a torch built without MKL's LAPACK
            continue
        if reason:
            assert reason in found.get(name, ""), (name, found.get(name))
        else:
            assert name not in found, (name, found[name])
    # a case's message names each library and reason once, a few names each
    lines = summary(problems)
    assert any(line.startswith("libnames.so imports c10::Dispatcher::") and "a dispatcher lookup" in line
               for line in lines), lines
    assert len(lines) == len({p.reason for p in problems})


def test_names_read_from_the_mangled_form():
    assert qualified_name("_ZN2at4_ops3exp4callERKNS_6TensorE") == "at::_ops::exp::call"
    assert qualified_name("_ZNK2at10TensorBase8data_ptrIfEEPT_v") == "at::TensorBase::data_ptr"
    assert qualified_name("_ZTVN5torch8autograd12AutogradMetaE") == "torch::autograd::AutogradMeta"
    assert qualified_name("_ZN3c1013ParallelGuardD1Ev") == "c10::ParallelGuard::~ParallelGuard"
    assert qualified_name("_ZN3c10lsERSoRKNS_6DeviceE") == "c10::operator<<"
    assert qualified_name("_ZN3c108toStringB5cxx11ERKNS_12OperatorNameE") == "c10::toString"
    assert qualified_name("_ZTHN3c104impl26raw_local_dispatch_key_setE") == "c10::impl::raw_local_dispatch_key_set"
    assert qualified_name("_ZNSo3putEc") == "std::ostream::put"
    assert qualified_name("_Z16THPVariable_WrapRKN2at10TensorBaseE") == "THPVariable_Wrap"
    assert qualified_name("expf") is None and qualified_name("_ZGVbN4v_expf") is None
    exported = frozenset({"_ZNSo3putEc", "cudaLaunchKernel"})  # what torch's libraries may also define
    assert not forbidden_symbol("_ZNSo3putEc", exported) and not forbidden_symbol("cudaLaunchKernel", exported)


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_honest_kernel_libraries_pass_and_dispatcher_paths_do_not(prebuilt, tmp_path):
    """The bundled example's library and a kernel in a private namespace pass; the fixture that reaches
    softplus by every dispatcher path, and one that calls torch's Sleef, are refused, named."""
    site = tmp_path / "honest"
    site.mkdir()
    wheel = next((prebuilt("cpp_cpu") / "dist").glob("cann_bench*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        member = next(n for n in zf.namelist() if n.endswith(".so"))
        (site / "_C.so").write_bytes(zf.read(member))
    shutil.copy(compile_library("torch", GUARD_EVIDENCE / "own_namespace.cpp", f"-I{EXAMPLE_CSRC}"),
                site / "_kernels.so")
    problems, unreadable = scan_libraries(site)
    assert not problems and not unreadable, [p.detail() for p in problems]
    cheats = tmp_path / "cheats"
    cheats.mkdir()
    shutil.copy(compile_library("torch", GUARD_EVIDENCE / "dispatcher_paths.cpp"), cheats / "paths.so")
    if platform.machine() == "x86_64":
        shutil.copy(compile_library("torch", GUARD_EVIDENCE / "dispatcher_paths.cpp", "-DSLEEF_ONLY"),
                    cheats / "sleef.so")
    found = {(Path(p.library).name, p.name): p.reason for p in scan_libraries(cheats)[0]}
    assert "a dispatcher lookup" in found[("paths.so", "c10::Dispatcher::findSchemaOrThrow")]
    assert found[("paths.so", "at::_ops::softplus::call")] == "the builtin op aten::softplus"
    if platform.machine() == "x86_64":
        assert "Sleef" in found[("sleef.so", "Sleef_expf8_u10")]
        assert [name for lib, name in found if lib == "sleef.so"] == ["Sleef_expf8_u10"]
