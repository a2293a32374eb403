// The core of the Kineto bridge, compiled into the product module (neuron_kineto.cpp) and the
// test and bench module (neuron_kineto_testing.cpp), each with its own state (internal linkage):
// the correlation stack, the record layout, the activity arena and the one conversion of records
// into Kineto activities. Everything else is Python (collectors/session.py).
// Build flags (_build.py): -DUSE_KINETO -DFMT_HEADER_ONLY, include <torch>/include/kineto.

#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>

namespace py = pybind11;
namespace lk = libkineto;

namespace neuron_kineto {
namespace {

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);  // the clock torch.profiler stamps CPU ops with
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// ---------------------------------------------------------------- correlation stack
// Every (thread, correlation id, its parent, push_ns, pop_ns) interval while recording: Python
// gets them as an (n, 5) int64 array (session.STACK_COLUMNS) and links by containment with them.
struct Interval {
  int64_t tid, id, parent, push_ns, pop_ns;
};
static_assert(sizeof(Interval) == 5 * sizeof(int64_t));

thread_local std::vector<Interval> t_stack;  // open frames (pop_ns unset)
thread_local int32_t t_tid = 0;
std::mutex g_iv_mu;
std::vector<Interval> g_intervals;
std::atomic<bool> g_recording{false};

std::vector<Interval> take_intervals() {
  std::lock_guard<std::mutex> lock(g_iv_mu);
  return std::exchange(g_intervals, {});
}

int64_t current_correlation_id() { return t_stack.empty() ? 0 : t_stack.back().id; }

void push_correlation(uint64_t id) {
  if (t_tid == 0) { t_tid = static_cast<int32_t>(syscall(SYS_gettid)); }
  t_stack.push_back({t_tid, static_cast<int64_t>(id), current_correlation_id(), now_ns(), 0});
}

void pop_correlation() {
  if (t_stack.empty()) { return; }
  Interval iv = t_stack.back();
  t_stack.pop_back();
  if (g_recording.load(std::memory_order_relaxed)) {
    iv.pop_ns = now_ns();
    std::lock_guard<std::mutex> lock(g_iv_mu);
    g_intervals.push_back(iv);
  }
}

// ---------------------------------------------------------------- record layout
// One placed trace row: runtime_trace.records.RECORD, field for field (meanings there).
struct Record {
  int64_t start_ns, end_ns, pid, tid, external_id, exec_id, flops, bytes, device, stream,
      correlation, flow_id, activity;
  int32_t name_id, args_id, kineto_type;
  uint8_t kind, category;
  bool flow_start;
  double tflops, gbps;  // computed in Python (records.with_rates): only formatted here
};
static_assert(std::is_standard_layout_v<Record> && std::is_trivially_copyable_v<Record>);
static_assert(sizeof(Record) == 136 && offsetof(Record, activity) == 96 &&
                  offsetof(Record, name_id) == 104 && offsetof(Record, kineto_type) == 112 &&
                  offsetof(Record, kind) == 116 && offsetof(Record, flow_start) == 118 &&
                  offsetof(Record, tflops) == 120 && offsetof(Record, gbps) == 128,
              "Record must keep the layout of runtime_trace.records.RECORD");

// Record as a numpy dtype (pybind11 reads the offsets and size): Python compares it with RECORD
// when the module loads.
py::dtype record_dtype() {
  static const bool registered = [] {
    PYBIND11_NUMPY_DTYPE(Record, start_ns, end_ns, pid, tid, external_id, exec_id, flops, bytes,
                         device, stream, correlation, flow_id, activity, name_id, args_id,
                         kineto_type, kind, category, flow_start, tflops, gbps);
    return true;
  }();
  static_cast<void>(registered);
  return py::dtype::of<Record>();
}

// Arg keys of the per-row numbers, and the metadata key of a failed session: set by Python
// (session.ARG_KEYS, spelled in trace/vocabulary.py) before any conversion.
struct Keys {
  std::string exec_id, flops, bytes, tflops, gbps, bandwidth, device, stream, correlation,
      collector_error, hidden;
  std::vector<std::string> dispatch_frames;  // record functions of the Python dispatch machinery
};
Keys g_keys;

void set_keys(const py::dict& keys) {
  auto key = [&keys](const char* name) { return keys[name].cast<std::string>(); };
  g_keys = Keys{key("exec_id"),     key("flops"),
                key("bytes"),       key("tflops"),
                key("gbps"),        key("bandwidth"),
                key("device"),      key("stream"),
                key("correlation"), key("collector_error"),
                key("hidden"),      keys["dispatch_frames"].cast<std::vector<std::string>>()};
}

using ArgList = std::vector<std::pair<std::string, std::string>>;  // key -> raw JSON value

// What Python hands over at stop() (session.RecordBuffer): the rows, the names name_id indexes
// and the args tables args_id indexes. Every activity converted from it shares it: Kineto and
// torch render args after the session is gone.
struct RecordBuffer {
  std::vector<Record> rows;
  std::vector<std::string> names;
  std::vector<ArgList> args;
};
using Records = std::shared_ptr<const RecordBuffer>;

Records records_from_dict(const py::dict& d) {
  static const py::dtype* layout = new py::dtype(record_dtype());  // leaked: no GIL at exit
  py::object obj = d["rows"];
  auto arr = py::reinterpret_borrow<py::array>(obj);
  if (!py::isinstance<py::array>(obj) || arr.ndim() != 1 || !arr.dtype().equal(*layout) ||
      !(arr.flags() & py::array::c_style)) {
    throw std::runtime_error("record buffer is not a contiguous array of records.RECORD rows");
  }
  auto r = std::make_shared<RecordBuffer>();
  r->rows.resize(static_cast<size_t>(arr.size()));
  if (!r->rows.empty()) { std::memcpy(r->rows.data(), arr.data(), arr.size() * sizeof(Record)); }
  r->names = d["names"].cast<std::vector<std::string>>();
  r->args = d["args"].cast<std::vector<ArgList>>();
  for (size_t i = 0; i < r->rows.size(); ++i) {
    const Record& x = r->rows[i];
    if (x.name_id < 0 || static_cast<size_t>(x.name_id) >= r->names.size() || x.args_id < -1 ||
        x.args_id >= static_cast<int32_t>(r->args.size())) {
      throw std::runtime_error("record buffer row " + std::to_string(i) + " has a bad index");
    }
  }
  return r;
}

// ---------------------------------------------------------------- activity arena
// Activities are allocated from pre-faulted chunks (mmap + MAP_POPULATE, growing 1 MiB ->
// 64 MiB): first-touch page faults dominated converting a million activities one malloc each.
// Each object is preceded by its chunk pointer; a chunk is unmapped when its last object goes.
namespace arena {
struct Chunk {
  size_t size, used;
  int64_t live;
  bool retired;
};
constexpr size_t kHeader = 16;
constexpr size_t kFirst = (sizeof(Chunk) + kHeader - 1) / kHeader * kHeader;  // first object
std::mutex mu;
Chunk* current = nullptr;
size_t next_size = 1 << 20;

void unmap_if_done(Chunk* c) {
  if (c->retired && c->live == 0) { munmap(c, c->size); }
}

void* alloc(size_t n) {
  n = (n + kHeader - 1) / kHeader * kHeader + kHeader;
  std::lock_guard<std::mutex> lock(mu);
  if (current != nullptr && current->live == 0) { current->used = kFirst; }  // all gone: reuse
  if (current == nullptr || current->used + n > current->size) {
    if (current != nullptr) {
      current->retired = true;
      unmap_if_done(current);
    }
    size_t size = std::max(next_size, kFirst + n);
    next_size = std::min<size_t>(next_size * 2, 64 << 20);
    void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (mem == MAP_FAILED) { throw std::bad_alloc(); }
    current = new (mem) Chunk{size, kFirst, 0, false};
  }
  char* p = reinterpret_cast<char*>(current) + current->used;
  current->used += n;
  current->live += 1;
  *reinterpret_cast<Chunk**>(p) = current;
  return p + kHeader;
}

void release(void* obj) {
  Chunk* c = *reinterpret_cast<Chunk**>(static_cast<char*>(obj) - kHeader);
  std::lock_guard<std::mutex> lock(mu);
  c->live -= 1;
  unmap_if_done(c);
}
}  // namespace arena

// A GenericTraceActivity whose args are rendered on demand from its row, so converting a million
// rows allocates one object each instead of a metadata map each.
class NeuronActivity : public lk::GenericTraceActivity {
 public:
  static void* operator new(size_t n) { return arena::alloc(n); }
  static void operator delete(void* p) { arena::release(p); }

  NeuronActivity(const lk::TraceSpan& span, const Records& records, const Record& x)
      : lk::GenericTraceActivity(span, static_cast<lk::ActivityType>(x.kineto_type),
                                 records->names[x.name_id]),
        records_(records),
        x_(x),
        extra_(x.args_id >= 0 ? &records->args[x.args_id] : nullptr) {}

  Records records_;  // kept alive for x_ and extra_
  const Record& x_;
  const ArgList* extra_;

  const std::string metadataJson() const override {
    std::string out;
    out.reserve(160);
    auto it = std::back_inserter(out);  // fmt writes straight into the string
    auto key = [&out](const std::string& k) {
      out += out.empty() ? "\"" : ", \"";
      out += k;
      out += "\": ";
    };
    // -1: absent. device/stream/correlation are CUDA's keys on device work (and runtime calls).
    const std::pair<int64_t, const std::string*> numbers[] = {{x_.device, &g_keys.device},
                                                              {x_.stream, &g_keys.stream},
                                                              {x_.correlation, &g_keys.correlation},
                                                              {x_.exec_id, &g_keys.exec_id}};
    for (const auto& [value, k] : numbers) {
      if (value >= 0) {
        key(*k);
        fmt::format_to(it, "{}", value);
      }
    }
    if (x_.flops >= 0) {
      key(g_keys.flops);
      fmt::format_to(it, "{}", x_.flops);
      key(g_keys.tflops);
      fmt::format_to(it, "{:.6g}", x_.tflops);
    }
    if (x_.bytes >= 0) {
      key(g_keys.bytes);
      fmt::format_to(it, "{}", x_.bytes);
      key(activityType == lk::ActivityType::GPU_MEMCPY ? g_keys.bandwidth : g_keys.gbps);
      fmt::format_to(it, "{:.6g}", x_.gbps);
    }
    if (extra_) {
      for (const auto& [k, v] : *extra_) {
        key(k);
        out += v;
      }
    }
    return out;
  }

  const std::string getMetadataValue(const std::string& key) const override {
    if (key == g_keys.flops && x_.flops >= 0) { return std::to_string(x_.flops); }
    if (key == g_keys.bytes && x_.bytes >= 0) { return std::to_string(x_.bytes); }
    if (extra_) {
      for (const auto& kv : *extra_) {
        if (kv.first == key) { return kv.second; }
      }
    }
    return "";
  }
};

// Record functions of the Python dispatch machinery (a device's tensor subclass or mode): work
// launched under them belongs to the aten op around them, found through the recorded parent.
bool is_dispatch_frame(const lk::ITraceActivity* a) {
  if (!a) { return false; }
  const auto& frames = g_keys.dispatch_frames;  // vocabulary.DISPATCH_FRAMES, set by Python
  return std::find(frames.begin(), frames.end(), a->name()) != frames.end();
}

using ParentMap = std::unordered_map<int64_t, int64_t>;

// records.KINETO_COUNTER: MTIA_COUNTERS, an activity type Kineto writes as a counter ("C") event.
constexpr int32_t kCounterType = static_cast<int32_t>(lk::ActivityType::MTIA_COUNTERS);

// The one conversion: record buffer -> Kineto activities appended to `buf`.
void convert(const Records& r, lk::CpuTraceBuffer& buf, const lk::getLinkedActivityCallback* linked,
             const ParentMap* parents = nullptr) {
  int32_t last_corr = 0, last_id = 0;
  const lk::ITraceActivity* last_link = nullptr;
  for (const Record& x : r->rows) {
    auto act = std::make_unique<NeuronActivity>(buf.span, r, x);
    const auto external_id = static_cast<int32_t>(x.external_id);  // Kineto's ids are int32
    act->startTime = x.start_ns;
    act->endTime = x.end_ns;
    act->id = external_id;
    act->device = x.pid;
    act->resource = x.tid;
    act->threadId = static_cast<int32_t>(x.tid);
    if (x.kineto_type == kCounterType && act->extra_) {
      // A counter sample: Kineto's JSON writer renders this type as a "C" event whose args are
      // the typed counter values, so every arg but "hidden" is one series.
      for (const auto& [k, v] : *act->extra_) {
        if (k != g_keys.hidden) { act->addCounterValue(k, std::strtod(v.c_str(), nullptr)); }
      }
    }
    if (x.flow_id > 0) {
      act->flow.id = static_cast<uint32_t>(x.flow_id);
      act->flow.type = lk::kLinkAsyncCpuGpu;
      act->flow.start = x.flow_start ? 1 : 0;
    }
    if (linked && *linked && external_id != 0) {
      if (external_id != last_corr) {
        last_corr = external_id;
        int32_t corr = external_id;
        last_link = (*linked)(corr);
        while (parents && is_dispatch_frame(last_link)) {
          auto it = parents->find(corr);
          if (it == parents->end() || it->second == 0) { break; }
          corr = static_cast<int32_t>(it->second);
          last_link = (*linked)(corr);
        }
        last_id = last_link ? corr : 0;
      }
      act->linked = last_link;
      // torch reads an unlinked activity's id as its own correlation id: a stale one would make
      // it collect another op's device time, so only linked activities keep theirs.
      act->id = last_id;
    }
    buf.activities.push_back(std::move(act));
  }
}

}  // namespace
}  // namespace neuron_kineto
