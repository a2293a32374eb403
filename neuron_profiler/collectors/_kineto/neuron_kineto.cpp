// The Kineto bridge, and nothing else: a libkineto::IActivityProfiler registered through torch's
// PrivateUse1ProfilerRegistry. Its session keeps the correlation stack, takes the record buffer
// Python hands over at stop() and converts it into Kineto activities in processTrace (the core
// is neuron_kineto.h). Parsing, linking, the window and the record layout's content are Python
// (neuron_profiler/collectors/session.py, runtime_trace/placement.py); this file calls back
// into it. Test and bench entry points are in neuron_kineto_testing.cpp, a module of their own.

#include "neuron_kineto.h"

#include <set>
#include <tuple>

#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

namespace neuron_kineto {
namespace {

py::object& controller() {
  static py::object* obj = new py::object();  // leaked on purpose: no GIL at process exit
  return *obj;
}

using DeviceRow = std::tuple<int64_t, int64_t, std::string, std::string>;  // pid, sort, name, label
using ResourceRow = std::tuple<int64_t, int64_t, int64_t, std::string>;    // tid, sort, pid, name

lk::DeviceInfo device_info(const DeviceRow& d) {
  return lk::DeviceInfo{std::get<0>(d), std::get<1>(d), std::get<2>(d), std::get<3>(d)};
}

class NeuronSession : public lk::IActivityProfilerSession {
 public:
  void start() override {
    {
      std::lock_guard<std::mutex> lock(g_iv_mu);
      g_intervals.clear();
    }
    start_ns_ = now_ns();
    g_recording.store(true);
    call_python("start", [&](py::object& c) { c.attr("start")(); });
    status_ = lk::TraceStatus::RECORDING;
  }

  void stop() override {
    stop_ns_ = now_ns();
    g_recording.store(false);
    std::vector<Interval> ivs;
    {
      std::lock_guard<std::mutex> lock(g_iv_mu);
      ivs.swap(g_intervals);
    }
    parents_.clear();
    for (const auto& iv : ivs) { parents_[iv.id] = iv.parent; }
    call_python("stop", [&](py::object& c) {
      size_t n = ivs.size();
      py::array_t<int64_t> tid(n), corr(n), push(n), pop(n);
      auto t = tid.mutable_unchecked<1>();
      auto c2 = corr.mutable_unchecked<1>();
      auto p = push.mutable_unchecked<1>();
      auto q = pop.mutable_unchecked<1>();
      for (size_t i = 0; i < n; ++i) {
        t(i) = ivs[i].tid;
        c2(i) = static_cast<int64_t>(ivs[i].id);
        p(i) = ivs[i].push_ns;
        q(i) = ivs[i].pop_ns;
      }
      py::dict res = c.attr("stop")(start_ns_, stop_ns_, tid, corr, push, pop);
      records_ = records_from_dict(res["records"].cast<py::dict>());
      device_properties_ = res["device_properties"].cast<std::string>();
      metadata_ = res["metadata"].cast<std::unordered_map<std::string, std::string>>();
      devices_ = res["devices"].cast<std::vector<DeviceRow>>();
      resources_ = res["resources"].cast<std::vector<ResourceRow>>();
    });
    status_ = lk::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(lk::ActivityLogger& logger) override { processTrace(logger, nullptr, 0, 0); }

  void processTrace(lk::ActivityLogger& logger, lk::getLinkedActivityCallback getLinked,
                    int64_t /*startTime*/, int64_t /*endTime*/) override {
    // The window was applied in Python at stop() (by launch time, counted in the metadata).
    buffer_ = std::make_unique<lk::CpuTraceBuffer>();
    buffer_->span = lk::TraceSpan(start_ns_, stop_ns_, "NeuronCore");
    buffer_->gpuOpCount = static_cast<int>(records_.rows.size());
    convert(records_, *buffer_, &getLinked, &parents_);
    for (const auto& act : buffer_->activities) {
      // handleActivity keeps a pointer (ownership moves with getTraceBuffer); act->log() would
      // make the in-memory logger copy a sliced GenericTraceActivity and lose the args.
      logger.handleActivity(*act);
    }
    for (size_t i = 1; i < devices_.size(); ++i) {  // devices_[0] comes from getDeviceInfo()
      logger.handleDeviceInfo(device_info(devices_[i]), start_ns_);
    }
  }

  std::unique_ptr<lk::DeviceInfo> getDeviceInfo() override {
    if (devices_.empty()) { return nullptr; }
    return std::make_unique<lk::DeviceInfo>(device_info(devices_[0]));
  }

  std::vector<lk::ResourceInfo> getResourceInfos() override {
    std::vector<lk::ResourceInfo> out;
    for (const auto& [tid, sort_index, pid, name] : resources_) {
      out.push_back(lk::ResourceInfo{tid, sort_index, pid, name});
    }
    return out;
  }

  std::unique_ptr<lk::CpuTraceBuffer> getTraceBuffer() override { return std::move(buffer_); }

  void pushCorrelationId(uint64_t id) override { push_correlation(id); }
  void popCorrelationId() override { pop_correlation(); }

  std::string getDeviceProperties() override { return device_properties_; }

  std::unordered_map<std::string, std::string> getMetadata() override { return metadata_; }

 private:
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
      metadata_[g_keys.collector_error] = "\"" + sanitize(msg) + "\"";
      status_ = lk::TraceStatus::ERROR;
      try {
        py::module_::import("warnings").attr("warn")(msg);
      } catch (...) {}
    }
  }

  static std::string sanitize(std::string s) {
    for (auto& ch : s) {
      if (ch == '"' || ch == '\\' || ch == '\n') { ch = '\''; }
    }
    return s;
  }

  int64_t start_ns_{0}, stop_ns_{0};
  RecordBuffer records_;
  ParentMap parents_;
  std::string device_properties_;
  std::unordered_map<std::string, std::string> metadata_;
  std::vector<DeviceRow> devices_;
  std::vector<ResourceRow> resources_;
  std::vector<std::string> errors_;
  std::unique_ptr<lk::CpuTraceBuffer> buffer_;
};

// Device activity types: configure() returns nullptr unless one of them was asked for, because
// the registered plugin is also configured for CPU-only profiles.
const std::set<lk::ActivityType>& device_types() {
  static const std::set<lk::ActivityType> s{lk::ActivityType::CONCURRENT_KERNEL,
                                            lk::ActivityType::GPU_MEMCPY};
  return s;
}

class NeuronProfiler : public lk::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<lk::ActivityType>& availableActivities() const override {
    static const std::set<lk::ActivityType> s{
        lk::ActivityType::CONCURRENT_KERNEL, lk::ActivityType::GPU_MEMCPY,
        lk::ActivityType::PRIVATEUSE1_RUNTIME, lk::ActivityType::PRIVATEUSE1_DRIVER};
    return s;
  }
  std::unique_ptr<lk::IActivityProfilerSession> configure(const std::set<lk::ActivityType>& types,
                                                          const lk::Config& /*config*/) override {
    for (auto t : types) {
      if (device_types().count(t)) { return std::make_unique<NeuronSession>(); }
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
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
        []() -> std::unique_ptr<lk::IActivityProfiler> {
          return std::make_unique<NeuronProfiler>();
        });
    g_registered = true;
  }
}

}  // namespace
}  // namespace neuron_kineto

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Kineto bridge of neuron-profiler (see neuron_profiler/collectors/session.py)";
  m.def("register_profiler", &neuron_kineto::register_profiler, py::arg("controller"),
        py::arg("keys"));
  m.def("current_correlation_id", &neuron_kineto::current_correlation_id);
  m.def("record_dtype", &neuron_kineto::record_dtype);
}
