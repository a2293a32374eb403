// What the emulated neuron device's memory needs from C++ (the allocator itself is Python,
// emulator/memory.py; docs/emulator.md, Memory), none of it the Kineto bridge's business:
// - a c10::DeviceAllocator: torch.accelerator.memory reads device memory statistics from
//   c10::getDeviceAllocator(PrivateUse1) (ATen/DeviceAccelerator.h), a dynamic_cast of
//   c10::GetAllocator(PrivateUse1), so this answers each question by calling torch.neuron.memory's
//   function of the same meaning (memory_api.py) under the GIL;
// - the profiler's memory reports (c10::reportMemoryUsageToProfiler has no Python binding);
// - step annotations for memory snapshots (a RecordFunction callback);
// - PrivateUse1 hooks (ATen/detail/PrivateUse1HooksInterface.h) for what C++ code asks of any
//   accelerator: DDP's reducer stages its used-parameter map (find_unused_parameters,
//   static_graph) in pinned host memory from the hooks' pinned allocator;
// - the PrivateUse1 device guard (c10/core/impl/DeviceGuardImplInterface.h), which C++ code
//   (autograd's engine, around every backward node) calls, also while an exception unwinds;
// - torch.Generator(device="neuron"): a CPU generator (mt19937) on the neuron device, whose
//   state the device's random ops draw from (dispatch.py runs them on a host twin of it).
// Only the headers it uses (torch/extension.h, all of ATen, would double the build's time).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

namespace py = pybind11;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

namespace {

constexpr const char* kFields[] = {"current", "peak", "allocated", "freed"};

// Runs fn holding the GIL. A Python exception passes through as itself: pybind11's
// error_already_set, restored by the torch binding that called in (the GIL-safe kind).
template <typename Fn>
auto inPython(Fn fn) -> decltype(fn()) {
  py::gil_scoped_acquire gil;
  return fn();
}

struct EmulatorAllocator final : c10::DeviceAllocator {
  // neuron_profiler.emulator.memory_api (torch.neuron.memory's functions); a strong reference never
  // released: c10 keeps this allocator to the end of the process, past the interpreter's
  // finalisation.
  PyObject* api = nullptr;

  // The emulator's tensors are wrapper subclasses whose storage holds no data (their memory is
  // the held host tensor, emulator/tensor.py), and its factory ops run in a Python fallback, so
  // device memory is never asked of c10. What still asks (torch.UntypedStorage(n,
  // device="neuron")) found no PrivateUse1 allocator before this one (a null pointer) and fails
  // here with a message instead.
  c10::DataPtr allocate(size_t) override {
    TORCH_CHECK(
        false,
        "the emulated neuron device allocates no memory through c10: its tensors' memory "
        "is held by host tensors (neuron_profiler.emulator); create device tensors with torch ops "
        "(torch.empty(n, device='neuron'))");
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool initialized() override { return true; }
  // No cache: every buffer is returned when its tensor dies (emulator/memory.py).
  void emptyCache(c10::MempoolId_t) override {}
  // No stream-ordered reuse: the emulator never hands a freed buffer to another stream's work.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  // memory_stats()' "<name>.all.<field>" figures in the all-pool Stat of each StatArray; the
  // emulator keeps no small/large pools, so those stay 0.
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    DeviceStats stats;
    inPython([&] {
      py::dict flat = py::handle(api).attr("memory_stats")(device);
      const std::pair<const char*, StatArray*> arrays[] = {
          {"allocation", &stats.allocation},
          {"segment", &stats.segment},
          {"active", &stats.active},
          {"allocated_bytes", &stats.allocated_bytes},
          {"reserved_bytes", &stats.reserved_bytes},
          {"active_bytes", &stats.active_bytes},
          {"requested_bytes", &stats.requested_bytes},
      };
      for (const auto& [name, array] : arrays) {
        auto& stat = (*array)[static_cast<size_t>(StatType::AGGREGATE)];
        int64_t* values[] = {&stat.current, &stat.peak, &stat.allocated, &stat.freed};
        for (size_t i = 0; i < 4; ++i) {
          *values[i] = flat[py::str(std::string(name) + ".all." + kFields[i])].cast<int64_t>();
        }
      }
      stats.num_alloc_retries = flat["num_alloc_retries"].cast<int64_t>();
      stats.num_ooms = flat["num_ooms"].cast<int64_t>();
      stats.num_device_alloc = flat["num_device_alloc"].cast<int64_t>();
      stats.num_device_free = flat["num_device_free"].cast<int64_t>();
    });
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    inPython([&] { py::handle(api).attr("reset_accumulated_memory_stats")(device); });
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    inPython([&] { py::handle(api).attr("reset_peak_memory_stats")(device); });
  }
  // (free, total): the core's share of the chip's HBM less what is allocated (memory_api.py).
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    return inPython([&] {
      return py::handle(api).attr("get_memory_info")(device).cast<std::pair<size_t, size_t>>();
    });
  }
};

EmulatorAllocator* instance() {
  static auto* allocator = new EmulatorAllocator();  // never freed: c10 holds it (see api)
  return allocator;
}

// The emulated device's PrivateUse1 hooks, registered in place of torch's Python dummy hooks
// (torch.utils.backend_registration: available, built, a primary context) with the same
// answers, plus a pinned allocator: pinned host memory is ordinary host memory here
// (emulator/pinned.py: its Python registry is what ``is_pinned`` reads). Everything else keeps
// ATen's defaults.
std::mutex g_pinned_mutex;
std::unordered_set<void*> g_pinned;  // buffers of the pinned allocator, alive

void pinned_free(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  c10::free_cpu(ptr);
}

// Host memory that C++ code asked for as pinned: ordinary host memory whose buffers are known
// (``is_pinned_ptr``) for as long as they live, as the Python registry does for pin_memory().
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr != nullptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &pinned_free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

bool is_pinned_ptr(uintptr_t address) {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  return g_pinned.count(reinterpret_cast<void*>(address)) > 0;
}

// torch.Generator(device="neuron"): the host's generator kind (the device's random ops run on the
// host, and equal CPU's for a seed), on the neuron device. Its dispatch keys stay CPU's, so a host
// op given it fails in CPU's generator check, as a host op given a CUDA generator does.
struct NeuronGenerator final : at::CPUGeneratorImpl {
  explicit NeuronGenerator(c10::DeviceIndex index) {
    device_ = c10::Device(c10::DeviceType::PrivateUse1, index);
  }
};

at::Generator new_generator(c10::DeviceIndex index) {
  return at::make_generator<NeuronGenerator>(index);
}

struct EmulatorHooks final : at::PrivateUse1HooksInterface {
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return new_generator(index);
  }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  at::Allocator* getPinnedMemoryAllocator() const override {
    static auto* allocator = new PinnedAllocator();  // never freed: tensors hold it
    return allocator;
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned_ptr(reinterpret_cast<uintptr_t>(data));
  }
};

// Registers the hooks; false (nothing changed) when hooks are registered already (ATen takes
// them once per process).
bool install_hooks() {
  if (at::isPrivateUse1HooksRegistered()) { return false; }
  static auto* hooks = new EmulatorHooks();  // never freed: ATen holds it
  at::RegisterPrivateUse1HooksInterface(hooks);
  return true;
}

// The device guard, registered in place of torch's Python one (torch._C._acc.DeviceGuard) with
// the same answers: one device, index 0; one stream, the default (the emulator's streams and
// current core are Python state, torch.neuron's, which C++ code never asks for); events and
// streams are no-ops (always complete). Torch's asks Python for type() in each of these, also in
// the noexcept exchangeStream a StreamGuard's destructor calls: autograd's engine unwinding a
// Python exception from a backward hook (the error still set) got an exception there and
// std::terminate. These never call Python and never throw.
struct EmulatorDeviceGuard final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
  static c10::Device device0() noexcept { return c10::Device(kType, 0); }
  static c10::Stream default_stream() noexcept {
    return c10::Stream(c10::Stream::DEFAULT, device0());
  }

  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device) const override { return device0(); }
  c10::Device getDevice() const override { return device0(); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override { return default_stream(); }
  c10::Stream getNewStream(c10::Device, int) const override { return default_stream(); }
  c10::Stream exchangeStream(c10::Stream) const noexcept override { return default_stream(); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};

// Registers the device guard; false (nothing changed) when a PrivateUse1 guard is registered
// already (c10 would replace it: a real backend's, or torch's Python one, is kept).
bool install_device_guard() {
  if (c10::impl::hasDeviceGuardImpl(c10::DeviceType::PrivateUse1)) { return false; }
  static auto* guard = new EmulatorDeviceGuard();  // never freed: c10's registry holds it
  c10::impl::registerDeviceGuard(c10::DeviceType::PrivateUse1, guard);
  return true;
}

// Registers the allocator for PrivateUse1, answering from ``api``; false (nothing changed)
// when another PrivateUse1 allocator is registered: a real backend's, never replaced.
bool install(py::object api) {
  auto* current = c10::GetAllocator(c10::DeviceType::PrivateUse1);
  if (current != nullptr && current != instance()) { return false; }
  Py_XDECREF(instance()->api);
  instance()->api = api.release().ptr();
  c10::SetAllocator(c10::DeviceType::PrivateUse1, instance());
  return true;
}

// ---------------------------------------------------------------- the profiler's memory reports
// The emulated allocator reports each allocation (size > 0) and free (size < 0) here, as a C++
// PrivateUse1 allocator does: torch.profiler's [memory] events and key_averages()' device memory
// columns read these reports.
//
// The device's buffers are host tensors to PyTorch, so the CPU allocator would report them as
// host memory too: while the emulator runs an op whose outputs are device buffers, it turns the
// host reports off on its thread (host_reports_off: a null PROFILER_STATE entry on the thread's
// debug-info stack, which c10::reportMemoryUsageToProfiler then finds), and its own device
// reports go to the profiler's reporter saved at that moment.
thread_local c10::MemoryReportingInfoBase* t_reporter = nullptr;
thread_local int t_quiet_depth = 0;

c10::MemoryReportingInfoBase* current_reporter() {
  return static_cast<c10::MemoryReportingInfoBase*>(
      c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE));
}

void report_memory_usage(uintptr_t ptr, int64_t alloc_size, int64_t total_allocated,
                         int64_t total_reserved, int64_t device_index) {
  c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device_index));
  auto* reporter = t_quiet_depth > 0 ? t_reporter : current_reporter();
  if (reporter != nullptr && reporter->memoryProfilingEnabled()) {
    reporter->reportMemoryUsage(reinterpret_cast<void*>(ptr), alloc_size,
                                static_cast<size_t>(total_allocated),
                                static_cast<size_t>(total_reserved), device);
  }
}

bool host_reports_off() {
  if (t_quiet_depth == 0) {
    auto* reporter = current_reporter();
    if (reporter == nullptr || !reporter->memoryProfilingEnabled()) { return false; }
    t_reporter = reporter;
  }
  ++t_quiet_depth;
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, nullptr);
  return true;
}

void host_reports_on() {
  c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  if (--t_quiet_depth == 0) { t_reporter = nullptr; }
}

// ---------------------------------------------------------------- snapshot step annotations
// While the emulated allocator records its history (emulator/snapshot.py), the start and end of
// each user-scope record function whose name starts with "ProfilerStep#" (torch.profiler's
// prof.step()), in host Unix-epoch microseconds, as CUDA's allocator notes them.
constexpr const char* kStepPrefix = "ProfilerStep#";
using StepMark = std::tuple<std::string, bool, int64_t>;  // name, start?, time_us
std::mutex g_steps_mutex;
std::vector<StepMark> g_steps;
std::optional<at::CallbackHandle> g_steps_handle;

void note_step(const at::RecordFunction& fn, bool start) {
  const char* name = fn.name();
  if (std::strncmp(name, kStepPrefix, std::strlen(kStepPrefix)) != 0) { return; }
  using namespace std::chrono;
  int64_t now_us = duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(g_steps_mutex);
  g_steps.emplace_back(name, start, now_us);
}

void record_steps(bool enabled) {
  if (enabled && !g_steps_handle) {
    auto cb = at::RecordFunctionCallback(
                  [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
                    note_step(fn, true);
                    return nullptr;
                  },
                  [](const at::RecordFunction& fn, at::ObserverContext*) { note_step(fn, false); })
                  .scopes({at::RecordScope::USER_SCOPE});
    g_steps_handle = at::addGlobalCallback(cb);
  } else if (!enabled && g_steps_handle) {
    at::removeCallback(*g_steps_handle);
    g_steps_handle.reset();
  }
}

std::vector<StepMark> take_steps() {
  std::lock_guard<std::mutex> lock(g_steps_mutex);
  return std::exchange(g_steps, {});
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, "Register the emulator's PrivateUse1 DeviceAllocator.");
  m.def("install_hooks", &install_hooks, "Register the emulator's PrivateUse1 hooks.");
  m.def("install_device_guard", &install_device_guard,
        "Register the emulator's PrivateUse1 device guard.");
  m.def("is_pinned_ptr", &is_pinned_ptr, py::arg("address"));
  m.def("report_memory_usage", &report_memory_usage, py::arg("ptr"), py::arg("alloc_size"),
        py::arg("total_allocated"), py::arg("total_reserved"), py::arg("device_index"));
  m.def("memory_profiling_enabled", &c10::memoryProfilingEnabled);
  m.def("host_reports_off", &host_reports_off);
  m.def("host_reports_on", &host_reports_on);
  m.def("record_steps", &record_steps, py::arg("enabled"));
  m.def("take_steps", &take_steps);
}
