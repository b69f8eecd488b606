// Attacks on the judge's CPU floor and on the timing thread budget. One submission serves every test: the case's
// `threshold` attribute picks the variant (each test writes its own cases.yaml; no case's inputs reach a
// threshold, so the outputs are softplus's either way):
//
//   19  slow clock, patched in libc's text: clock_gettime's first bytes become a jump to slow_clock (mprotect
//       writable, write, mprotect back; the mapping keeps libc's path), and the loops run on a thread created and
//       joined inside the call, so the threads alive when the judge reads /proc never held the work's CPU time.
//   18  the same slow clock reached through data instead of code: the GOT slots of clock_gettime in every other
//       loaded object (the interpreter, libpython) are pointed at slow_clock; no executable page is written.
//   17  fan-out: each call splits its loop over kFanOut threads created and joined inside it; the clock is honest.
//   else  honest: one thread (the control).
//
// slow_clock subtracts `stolen`, which grows by 80% of each call's work when the call ends: the call looks 5x
// faster, while every other interval (the waits the judge holds the worker for, the phases around the calls)
// runs at full speed, so only the CPU time the kernel charged the worker contradicts it. Each variant prints to
// stderr (the case log) the CPU time its threads used and the CPUs they ran on, for the tests to compare with
// what the judge saw.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <elf.h>
#include <link.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kFanOut = 8;
std::atomic<int64_t> stolen{0};  // ns slow_clock hides
std::atomic<int> clock_hooked{0};

int64_t real_ns(clockid_t id) {
  struct timespec ts;
  syscall(SYS_clock_gettime, id, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t thread_cpu_ns() { return real_ns(CLOCK_THREAD_CPUTIME_ID); }

extern "C" int slow_clock(clockid_t id, struct timespec* ts) {
  long rc = syscall(SYS_clock_gettime, id, ts);
  if (rc == 0 && (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_RAW || id == CLOCK_BOOTTIME)) {
    int64_t ns = int64_t(ts->tv_sec) * 1000000000 + ts->tv_nsec - stolen.load();
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
  }
  return int(rc);
}

void writable(void* at, size_t bytes, int prot) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t start = uintptr_t(at) & ~(page - 1);
  mprotect(reinterpret_cast<void*>(start), uintptr_t(at) + bytes - start, prot);
}

void patch_libc_text() {  // movabs rax, slow_clock; jmp rax
#if defined(__x86_64__)
  unsigned char* entry = reinterpret_cast<unsigned char*>(&clock_gettime);
  void* target = reinterpret_cast<void*>(&slow_clock);
  writable(entry, 12, PROT_READ | PROT_WRITE | PROT_EXEC);
  entry[0] = 0x48;
  entry[1] = 0xb8;
  std::memcpy(entry + 2, &target, 8);
  entry[10] = 0xff;
  entry[11] = 0xe0;
  writable(entry, 12, PROT_READ | PROT_EXEC);
#endif
}

int redirect_got(struct dl_phdr_info* info, size_t, void* count) {
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (dyn == nullptr || std::strstr(info->dlpi_name, "libc.so") != nullptr) return 0;
  uintptr_t symtab = 0, strtab = 0, jmprel = 0, pltsz = 0, rela = 0, relasz = 0;
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_SYMTAB: symtab = dyn->d_un.d_ptr; break;
      case DT_STRTAB: strtab = dyn->d_un.d_ptr; break;
      case DT_JMPREL: jmprel = dyn->d_un.d_ptr; break;
      case DT_PLTRELSZ: pltsz = dyn->d_un.d_val; break;
      case DT_RELA: rela = dyn->d_un.d_ptr; break;
      case DT_RELASZ: relasz = dyn->d_un.d_val; break;
    }
  }
  auto fix = [&](uintptr_t p) { return p != 0 && p < info->dlpi_addr ? p + info->dlpi_addr : p; };
  symtab = fix(symtab), strtab = fix(strtab), jmprel = fix(jmprel), rela = fix(rela);
  if (symtab == 0 || strtab == 0) return 0;
  for (auto [table, size] : {std::pair{jmprel, pltsz}, std::pair{rela, relasz}}) {
    if (table == 0) continue;
    const auto* r = reinterpret_cast<const ElfW(Rela)*>(table);
    for (size_t k = 0; k < size / sizeof(ElfW(Rela)); ++k) {
      const auto* sym = reinterpret_cast<const ElfW(Sym)*>(symtab) + ELF64_R_SYM(r[k].r_info);
      if (ELF64_R_SYM(r[k].r_info) == 0 || std::strcmp(reinterpret_cast<const char*>(strtab) + sym->st_name,
                                                       "clock_gettime") != 0)
        continue;
      void** slot = reinterpret_cast<void**>(info->dlpi_addr + r[k].r_offset);
      writable(slot, sizeof(void*), PROT_READ | PROT_WRITE);
      *slot = reinterpret_cast<void*>(&slow_clock);
      ++*static_cast<int*>(count);
    }
  }
  return 0;
}

double softplus_one(double v, double beta, double threshold) {
  const double z = v * beta;
  if (z > threshold) return v;
  return ((z > 0.0 ? z : 0.0) + std::log1p(std::exp(-std::fabs(z)))) / beta;
}

struct Part {
  int64_t cpu_ns = 0;
  std::set<int> cpus;
};

void run_part(const float* x, float* y, int64_t begin, int64_t end, double beta, double threshold, Part* part) {
  const int64_t t0 = thread_cpu_ns();
  part->cpus.insert(sched_getcpu());
  for (int64_t i = begin; i < end; ++i) {
    y[i] = float(softplus_one(x[i], beta, threshold));
    if (((i - begin) & 65535) == 0) part->cpus.insert(sched_getcpu());
  }
  part->cpus.insert(sched_getcpu());
  part->cpu_ns = thread_cpu_ns() - t0;
}

at::Tensor softplus(const at::Tensor& x_in, double beta, double threshold) {
  TORCH_CHECK(x_in.scalar_type() == at::kFloat, "this kernel takes float32");
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options());
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const int64_t n = x.numel();
  const int variant = int(threshold);
  if (variant == 19 || variant == 18) {
    if (clock_hooked.exchange(1) == 0) {
      int slots = 0;
      if (variant == 19) patch_libc_text();
      else dl_iterate_phdr(redirect_got, &slots);
      std::fprintf(stderr, "attack: clock hooked (%s, %d GOT slot(s))\n", variant == 19 ? "libc text" : "GOT",
                   slots);
    }
    const int64_t start = real_ns(CLOCK_MONOTONIC);
    Part part;
    std::thread worker(run_part, in, out, int64_t(0), n, beta, threshold, &part);
    worker.join();
    const int64_t work = real_ns(CLOCK_MONOTONIC) - start;
    stolen += work * 4 / 5;
    std::fprintf(stderr, "attack: joined thread cpu_ns=%lld hidden_ns=%lld\n", (long long)part.cpu_ns,
                 (long long)(work * 4 / 5));
  } else if (variant == 17) {
    std::vector<Part> parts(kFanOut);
    std::vector<std::thread> threads;
    for (int t = 0; t < kFanOut; ++t)
      threads.emplace_back(run_part, in, out, n * t / kFanOut, n * (t + 1) / kFanOut, beta, threshold, &parts[t]);
    for (auto& t : threads) t.join();
    std::set<int> cpus;
    int64_t cpu_ns = 0;
    for (const auto& p : parts) cpus.insert(p.cpus.begin(), p.cpus.end()), cpu_ns += p.cpu_ns;
    std::string list;
    for (int c : cpus) list += (list.empty() ? "" : ",") + std::to_string(c);
    std::fprintf(stderr, "fanout: threads=%d cpu_ns=%lld cpus=%s\n", kFanOut, (long long)cpu_ns, list.c_str());
  } else {
    Part part;
    run_part(in, out, 0, n, beta, threshold, &part);
  }
  return y;
}

}  // namespace

TORCH_LIBRARY(cann_bench, m) { m.def("softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor"); }
TORCH_LIBRARY_IMPL(cann_bench, CPU, m) { m.impl("softplus", &softplus); }
