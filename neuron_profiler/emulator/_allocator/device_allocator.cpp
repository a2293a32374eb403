// The emulated neuron device's c10::DeviceAllocator. torch.accelerator.memory reads device
// memory statistics from c10::getDeviceAllocator(PrivateUse1) (ATen/DeviceAccelerator.h), a
// dynamic_cast of c10::GetAllocator(PrivateUse1); the emulator's allocator is Python
// (emulator/memory.py), so this answers each question by calling torch.neuron.memory's
// function of the same meaning (memory_api.py) under the GIL. docs/emulator.md, Memory.
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/extension.h>

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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, "Register the emulator's PrivateUse1 DeviceAllocator.");
}
