// The collector's module: a libkineto::IActivityProfiler registered through torch's
// PrivateUse1ProfilerRegistry (with Kineto directly where torch has none; register_profiler),
// whose session calls back into Python (session.Controller) when configured (prepare), at
// start() and stop() and converts
// the record buffer stop() returns in processTrace (core in neuron_kineto.h). Test and bench entry
// points are in neuron_kineto_testing.cpp.

#include "neuron_kineto.h"

#include <algorithm>
#include <set>
#include <tuple>

// torch >= 2.12 has the PrivateUse1 profiler registry; without it (or with
// -DNEURON_KINETO_NO_REGISTRY, how the tests build this path) the factory goes to Kineto directly,
// which is what the registry does once Kineto is initialised.
#if __has_include(<torch/csrc/profiler/standalone/privateuse1_profiler.h>) && \
    !defined(NEURON_KINETO_NO_REGISTRY)
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#define NEURON_KINETO_REGISTRY 1
#endif

namespace neuron_kineto {
namespace {

py::object& controller() {
  static py::object* obj = new py::object();  // leaked on purpose: no GIL at process exit
  return *obj;
}

class NeuronSession : public lk::IActivityProfilerSession {
 public:
  // Kineto configures a session at a schedule's warm-up (or just before start): capture begins
  // here, as CUPTI's does, so warm-up work that runs inside the window is in the trace.
  NeuronSession() {
    call_python("prepare", [&](py::object& c) { c.attr("prepare")(now_ns()); });
  }

  void start() override {
    take_intervals();  // an earlier session's, never handed over
    start_ns_ = now_ns();
    g_recording.store(true);
    call_python("start", [&](py::object& c) { c.attr("start")(); });
    status_ = lk::TraceStatus::RECORDING;
  }

  void stop() override {
    stop_ns_ = now_ns();
    g_recording.store(false);
    std::vector<Interval> ivs = take_intervals();
    for (const auto& iv : ivs) { parents_[iv.id] = iv.parent; }
    call_python("stop", [&](py::object& c) {
      auto n = static_cast<py::ssize_t>(ivs.size());
      py::array_t<int64_t> stack({n, py::ssize_t{5}}, reinterpret_cast<int64_t*>(ivs.data()));
      py::dict res = c.attr("stop")(start_ns_, stop_ns_, stack);
      records_ = records_from_dict(res["records"]);
      device_properties_ = res["device_properties"].cast<std::string>();
      metadata_ = res["metadata"].cast<std::unordered_map<std::string, std::string>>();
      for (const auto& [pid, sort_index, name, label] :
           res["devices"].cast<std::vector<Device>>()) {
        devices_.push_back(lk::DeviceInfo{pid, sort_index, name, label});
      }
      for (const auto& [tid, sort_index, pid, name] : res["resources"].cast<std::vector<Queue>>()) {
        resources_.push_back(lk::ResourceInfo{tid, sort_index, pid, name});
      }
    });
    status_ = lk::TraceStatus::PROCESSING;
  }

  void processTrace(lk::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  // The window was applied in Python at stop() (by launch time, counted in the metadata).
  void processTrace(lk::ActivityLogger& logger, lk::getLinkedActivityCallback getLinked,
                    int64_t /*startTime*/, int64_t /*endTime*/) override {
    buffer_ = std::make_unique<lk::CpuTraceBuffer>();
    buffer_->span = lk::TraceSpan(start_ns_, stop_ns_, "NeuronCore");
    buffer_->gpuOpCount = static_cast<int>(records_->rows.size());
    convert(records_, *buffer_, &getLinked, &parents_);
    for (const auto& act : buffer_->activities) {
      // handleActivity keeps a pointer (ownership moves with getTraceBuffer); act->log() would
      // make the in-memory logger copy a sliced GenericTraceActivity and lose the args.
      logger.handleActivity(*act);
    }
    for (size_t i = 1; i < devices_.size(); ++i) {  // devices_[0] comes from getDeviceInfo()
      logger.handleDeviceInfo(devices_[i], start_ns_);
    }
  }

  std::unique_ptr<lk::DeviceInfo> getDeviceInfo() override {
    return devices_.empty() ? nullptr : std::make_unique<lk::DeviceInfo>(devices_[0]);
  }

  std::vector<lk::ResourceInfo> getResourceInfos() override { return resources_; }
  std::unique_ptr<lk::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }
  std::string getDeviceProperties() override { return device_properties_; }
  std::unordered_map<std::string, std::string> getMetadata() override { return metadata_; }
  std::vector<std::string> errors() override { return errors_; }
  void pushCorrelationId(uint64_t id) override { push_correlation(id); }
  void popCorrelationId() override { pop_correlation(); }

 private:
  using Device = std::tuple<int64_t, int64_t, std::string, std::string>;  // pid, sort, name, label
  using Queue = std::tuple<int64_t, int64_t, int64_t, std::string>;       // tid, sort, pid, name

  // A failure (Python's or ours) fails the session, not the profile: an error, a warning and the
  // reason in the trace's metadata, with what Kineto's JSON writer cannot carry replaced.
  template <typename F>
  void call_python(const char* what, F&& f) {
    py::gil_scoped_acquire gil;
    try {
      if (!controller() || controller().is_none()) {
        throw std::runtime_error("no controller registered");
      }
      f(controller());
    } catch (const std::exception& e) {
      std::string msg = std::string("neuron collector ") + what + ": " + e.what();
      errors_.push_back(msg);
      std::replace_if(
          msg.begin(), msg.end(), [](char ch) { return ch == '"' || ch == '\\' || ch == '\n'; },
          '\'');
      metadata_[g_keys.collector_error] = "\"" + msg + "\"";
      status_ = lk::TraceStatus::ERROR;
      try {
        py::module_::import("warnings").attr("warn")(errors_.back());
      } catch (...) {}
    }
  }

  int64_t start_ns_{0}, stop_ns_{0};
  Records records_ = std::make_shared<RecordBuffer>();
  ParentMap parents_;
  std::string device_properties_;
  std::unordered_map<std::string, std::string> metadata_;
  std::vector<lk::DeviceInfo> devices_;
  std::vector<lk::ResourceInfo> resources_;
  std::vector<std::string> errors_;
  std::unique_ptr<lk::CpuTraceBuffer> buffer_;
};

class NeuronProfiler : public lk::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<lk::ActivityType>& availableActivities() const override {
    static const std::set<lk::ActivityType> s{
        lk::ActivityType::CONCURRENT_KERNEL, lk::ActivityType::GPU_MEMCPY,
        lk::ActivityType::PRIVATEUSE1_RUNTIME, lk::ActivityType::PRIVATEUSE1_DRIVER};
    return s;
  }
  // A session only when a device type was asked for: the registered plugin is also configured
  // for CPU-only profiles.
  std::unique_ptr<lk::IActivityProfilerSession> configure(const std::set<lk::ActivityType>& types,
                                                          const lk::Config& /*config*/) override {
    if (types.count(lk::ActivityType::CONCURRENT_KERNEL) ||
        types.count(lk::ActivityType::GPU_MEMCPY)) {
      return std::make_unique<NeuronSession>();
    }
    return nullptr;
  }
  std::unique_ptr<lk::IActivityProfilerSession> configure(int64_t /*ts_ms*/,
                                                          int64_t /*duration_ms*/,
                                                          const std::set<lk::ActivityType>& types,
                                                          const lk::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"neuron"};
};

bool g_registered = false;

void register_profiler(py::object ctrl, const py::dict& keys) {
  set_keys(keys);
  controller() = std::move(ctrl);
  if (!g_registered) {
    auto factory = []() -> std::unique_ptr<lk::IActivityProfiler> {
      return std::make_unique<NeuronProfiler>();
    };
#ifdef NEURON_KINETO_REGISTRY
    auto& registry = torch::profiler::impl::PrivateUse1ProfilerRegistry::instance();
    registry.registerFactory(factory);
    // torch hands the factory to Kineto only when a profile asks for PrivateUse1; a Kineto
    // already running for the daemon (KINETO_USE_DAEMON) gets it now, or its on-demand
    // captures would have no NEURON events (docs/collector.md, Kineto's on-demand paths).
    if (lk::api().isProfilerInitialized()) { registry.onKinetoInit(); }
#else
    lk::api().registerProfilerFactory(factory);
#endif
    g_registered = true;
  }
}

}  // namespace
}  // namespace neuron_kineto

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Kineto bridge of neuron-profiler (see neuron_profiler/collectors/session.py)";
  m.def("register_profiler", &neuron_kineto::register_profiler, py::arg("controller"),
        py::arg("keys"));
#ifdef NEURON_KINETO_REGISTRY
  m.attr("REGISTRATION") = "torch PrivateUse1ProfilerRegistry";
#else
  m.attr("REGISTRATION") = "libkineto registerProfilerFactory";
#endif
  m.def("current_correlation_id", &neuron_kineto::current_correlation_id);
  m.def("record_dtype", &neuron_kineto::record_dtype);
}
