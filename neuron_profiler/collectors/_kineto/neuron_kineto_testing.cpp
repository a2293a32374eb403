// Test and bench entry points of the Kineto bridge, a module of their own that the collector
// never loads (_build.load_testing_bridge() builds it when a test or bench asks): the core of
// neuron_kineto.h (its own copy: own keys, own correlation stack), driven without Kineto.

#include "neuron_kineto.h"

#include <chrono>

namespace neuron_kineto {
namespace {

// Convert a record buffer without a Kineto session; returns (seconds, count, rendered rows).
py::tuple convert_records(const py::dict& d, bool render) {
  Records r = records_from_dict(d);
  auto buf = std::make_unique<lk::CpuTraceBuffer>();
  auto t0 = std::chrono::steady_clock::now();
  convert(r, *buf, nullptr);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  py::list rows;
  if (render) {
    for (const auto& a : buf->activities) {
      rows.append(py::make_tuple(static_cast<int>(a->type()), a->name(), a->deviceId(),
                                 a->resourceId(), a->timestamp(), a->duration(), a->correlationId(),
                                 a->flowId(), a->flowStart(), a->metadataJson()));
    }
  }
  return py::make_tuple(secs, buf->activities.size(), rows);
}

// Seconds to render the args of every converted activity (what export costs).
double render_seconds(const py::dict& d) {
  Records r = records_from_dict(d);
  auto buf = std::make_unique<lk::CpuTraceBuffer>();
  convert(r, *buf, nullptr);
  auto t0 = std::chrono::steady_clock::now();
  size_t total = 0;
  for (const auto& a : buf->activities) { total += a->metadataJson().size(); }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile size_t sink = total;  // keep the rendering from being optimised away
  (void)sink;
  return secs;
}

}  // namespace
}  // namespace neuron_kineto

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Test and bench entry points of neuron-profiler's Kineto bridge";
  m.def("set_keys", &neuron_kineto::set_keys, py::arg("keys"));
  m.def("record_dtype", &neuron_kineto::record_dtype);
  m.def("convert_records", &neuron_kineto::convert_records, py::arg("records"),
        py::arg("render") = true);
  m.def("render_seconds", &neuron_kineto::render_seconds, py::arg("records"));
  m.def("current_correlation_id", &neuron_kineto::current_correlation_id);
  m.def("_push_correlation", &neuron_kineto::push_correlation, py::arg("id"));
  m.def("_pop_correlation", &neuron_kineto::pop_correlation);
}
