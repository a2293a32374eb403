// The core of the Kineto bridge, shared by the product module (neuron_kineto.cpp) and the test
// and bench module (neuron_kineto_testing.cpp): the correlation stack (recording every (thread,
// correlation id, push_ns, pop_ns) interval), the record layout, the record buffer Python hands
// over, the activity arena and the one conversion of records into Kineto activities. Everything
// has internal linkage: each module keeps its own state.
//
// Build flags (see _build.py): -DUSE_KINETO -DFMT_HEADER_ONLY, include <torch>/include/kineto.

#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>
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
struct Frame {
  uint64_t id, parent;
  int64_t push_ns;
};
struct Interval {
  int32_t tid;
  uint64_t id, parent;
  int64_t push_ns, pop_ns;
};

thread_local std::vector<Frame> t_stack;
thread_local int32_t t_tid = 0;
std::mutex g_iv_mu;
std::vector<Interval> g_intervals;
std::atomic<bool> g_recording{false};

int32_t this_tid() {
  if (t_tid == 0) { t_tid = static_cast<int32_t>(syscall(SYS_gettid)); }
  return t_tid;
}

uint64_t current_correlation_id() { return t_stack.empty() ? 0 : t_stack.back().id; }

void push_correlation(uint64_t id) {
  t_stack.push_back({id, t_stack.empty() ? 0 : t_stack.back().id, now_ns()});
}

void pop_correlation() {
  if (t_stack.empty()) { return; }
  Frame f = t_stack.back();
  t_stack.pop_back();
  if (g_recording.load(std::memory_order_relaxed)) {
    Interval iv{this_tid(), f.id, f.parent, f.push_ns, now_ns()};
    std::lock_guard<std::mutex> lock(g_iv_mu);
    g_intervals.push_back(iv);
  }
}

// ---------------------------------------------------------------- record layout
// One placed trace row: neuron_profiler.runtime_trace.records.RECORD, field for field (meanings
// there). Python checks record_dtype() against RECORD when the module loads.
struct Record {
  int64_t start_ns, end_ns, pid, tid, external_id, exec_id, flops, bytes, device, stream,
      correlation, flow_id, activity;
  int32_t name_id, args_id, kineto_type;
  uint8_t kind, category;
  bool flow_start;
};
static_assert(std::is_standard_layout_v<Record> && std::is_trivially_copyable_v<Record>);
static_assert(sizeof(Record) == 120 && offsetof(Record, activity) == 96 &&
                  offsetof(Record, name_id) == 104 && offsetof(Record, kineto_type) == 112 &&
                  offsetof(Record, kind) == 116 && offsetof(Record, flow_start) == 118,
              "Record must keep the layout of runtime_trace.records.RECORD");

py::dtype record_dtype() {
  py::list names, formats, offsets;
  auto add = [&](const char* name, size_t offset, py::dtype format) {
    names.append(name);
    formats.append(format);
    offsets.append(offset);
  };
#define NK_FIELD(f) add(#f, offsetof(Record, f), py::dtype::of<decltype(Record::f)>())
  // clang-format off
  NK_FIELD(start_ns); NK_FIELD(end_ns); NK_FIELD(pid); NK_FIELD(tid); NK_FIELD(external_id);
  NK_FIELD(exec_id); NK_FIELD(flops); NK_FIELD(bytes); NK_FIELD(device); NK_FIELD(stream);
  NK_FIELD(correlation); NK_FIELD(flow_id); NK_FIELD(activity); NK_FIELD(name_id);
  NK_FIELD(args_id); NK_FIELD(kineto_type); NK_FIELD(kind); NK_FIELD(category);
  NK_FIELD(flow_start);
  // clang-format on
#undef NK_FIELD
  return py::dtype(names, formats, offsets, sizeof(Record));
}

// Arg keys of the per-row numbers, and the metadata key of a failed session: set by Python
// (collectors/session.py ARG_KEYS, spelled in trace/vocabulary.py) before any conversion.
struct Keys {
  std::string exec_id, flops, bytes, tflops, gbps, bandwidth, device, stream, correlation,
      collector_error;
};
Keys g_keys;

void set_keys(const py::dict& keys) {
  auto key = [&keys](const char* name) { return keys[name].cast<std::string>(); };
  g_keys = Keys{key("exec_id"),     key("flops"),          key("bytes"),  key("tflops"),
                key("gbps"),        key("bandwidth"),      key("device"), key("stream"),
                key("correlation"), key("collector_error")};
}

using ArgList = std::vector<std::pair<std::string, std::string>>;  // key -> raw JSON value

// What Python hands over at stop(): the rows (copied out of the numpy buffer in one go), the
// names name_id indexes and the args tables args_id indexes.
struct RecordBuffer {
  std::vector<Record> rows;
  std::vector<std::string> names;
  // Shared with every activity: Kineto and torch read args after the session is gone.
  std::shared_ptr<const std::vector<ArgList>> args = std::make_shared<std::vector<ArgList>>();
};

RecordBuffer records_from_dict(const py::dict& d) {
  static const py::dtype* layout = new py::dtype(record_dtype());  // leaked: no GIL at exit
  py::object obj = d["rows"];
  auto arr = py::reinterpret_borrow<py::array>(obj);
  if (!py::isinstance<py::array>(obj) || arr.ndim() != 1 || !arr.dtype().equal(*layout) ||
      !(arr.flags() & py::array::c_style)) {
    throw std::runtime_error("record buffer is not a contiguous array of records.RECORD rows");
  }
  RecordBuffer r;
  r.rows.resize(static_cast<size_t>(arr.size()));
  if (!r.rows.empty()) { std::memcpy(r.rows.data(), arr.data(), r.rows.size() * sizeof(Record)); }
  r.names = d["names"].cast<std::vector<std::string>>();
  r.args = std::make_shared<const std::vector<ArgList>>(d["args"].cast<std::vector<ArgList>>());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const Record& x = r.rows[i];
    if (x.name_id < 0 || static_cast<size_t>(x.name_id) >= r.names.size() || x.args_id < -1 ||
        x.args_id >= static_cast<int32_t>(r.args->size())) {
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
std::mutex mu;
Chunk* current = nullptr;
size_t next_size = 1 << 20;
constexpr size_t kHeader = 16;

void unmap_if_done(Chunk* c) {
  if (c->retired && c->live == 0) { munmap(c, c->size); }
}

Chunk* new_chunk(size_t at_least) {
  size_t size = std::max(next_size, at_least + sizeof(Chunk) + kHeader);
  next_size = std::min<size_t>(next_size * 2, 64 << 20);
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mem == MAP_FAILED) { throw std::bad_alloc(); }
  auto* c = static_cast<Chunk*>(mem);
  *c = Chunk{size, (sizeof(Chunk) + kHeader - 1) / kHeader * kHeader, 0, false};
  return c;
}

void* alloc(size_t n) {
  n = (n + kHeader - 1) / kHeader * kHeader + kHeader;
  std::lock_guard<std::mutex> lock(mu);
  if (current != nullptr && current->live == 0) {  // everything in it is gone: reuse it
    current->used = (sizeof(Chunk) + kHeader - 1) / kHeader * kHeader;
  }
  if (current == nullptr || current->used + n > current->size) {
    if (current != nullptr) {
      current->retired = true;
      unmap_if_done(current);
    }
    current = new_chunk(n);
  }
  char* p = reinterpret_cast<char*>(current) + current->used;
  current->used += n;
  current->live += 1;
  *reinterpret_cast<Chunk**>(p) = current;
  return p + kHeader;
}

void release(void* obj) {
  char* p = static_cast<char*>(obj) - kHeader;
  Chunk* c = *reinterpret_cast<Chunk**>(p);
  std::lock_guard<std::mutex> lock(mu);
  c->live -= 1;
  unmap_if_done(c);
}
}  // namespace arena

// A GenericTraceActivity whose args are rendered on demand from numeric fields, so converting a
// million rows allocates one object each instead of a metadata map each.
class NeuronActivity : public lk::GenericTraceActivity {
 public:
  static void* operator new(size_t n) { return arena::alloc(n); }
  static void operator delete(void* p) { arena::release(p); }

  NeuronActivity(const lk::TraceSpan& span, lk::ActivityType t, const std::string& name)
      : lk::GenericTraceActivity(span, t, name) {}

  // -1: absent. device/stream/correlation are CUDA's keys on device work (and the runtime call).
  int64_t flops_{-1}, bytes_{-1}, exec_id_{-1}, device_{-1}, stream_{-1}, corr_{-1};
  std::shared_ptr<const std::vector<ArgList>> table_;
  const ArgList* extra_{nullptr};  // points into *table_, which this activity keeps alive

  const std::string metadataJson() const override {
    std::string out;
    out.reserve(160);
    auto add = [&out](const std::string& k, const std::string& v) {
      if (!out.empty()) { out += ", "; }
      out += '"';
      out += k;
      out += "\": ";
      out += v;
    };
    double dur = static_cast<double>(std::max<int64_t>(endTime - startTime, 1));
    const std::pair<int64_t, const std::string*> numbers[] = {{device_, &g_keys.device},
                                                              {stream_, &g_keys.stream},
                                                              {corr_, &g_keys.correlation},
                                                              {exec_id_, &g_keys.exec_id}};
    for (const auto& [value, key] : numbers) {
      if (value >= 0) { add(*key, std::to_string(value)); }
    }
    if (flops_ >= 0) {
      add(g_keys.flops, std::to_string(flops_));
      add(g_keys.tflops, fmt::format("{:.6g}", static_cast<double>(flops_) / dur / 1e3));
    }
    if (bytes_ >= 0) {
      add(g_keys.bytes, std::to_string(bytes_));
      const std::string& key =
          activityType == lk::ActivityType::GPU_MEMCPY ? g_keys.bandwidth : g_keys.gbps;
      add(key, fmt::format("{:.6g}", static_cast<double>(bytes_) / dur));
    }
    if (extra_) {
      for (const auto& kv : *extra_) { add(kv.first, kv.second); }
    }
    return out;
  }

  const std::string getMetadataValue(const std::string& key) const override {
    if (key == g_keys.flops && flops_ >= 0) { return std::to_string(flops_); }
    if (key == g_keys.bytes && bytes_ >= 0) { return std::to_string(bytes_); }
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
  const std::string n = a->name();
  return n == "PythonSubclass" || n == "PythonDispatchMode";
}

using ParentMap = std::unordered_map<uint64_t, uint64_t>;

// The one conversion: record buffer -> Kineto activities appended to `buf`.
void convert(const RecordBuffer& r, lk::CpuTraceBuffer& buf,
             const lk::getLinkedActivityCallback* linked, const ParentMap* parents = nullptr) {
  int32_t last_corr = 0, last_id = 0;
  const lk::ITraceActivity* last_link = nullptr;
  for (const Record& x : r.rows) {
    auto act = std::make_unique<NeuronActivity>(
        buf.span, static_cast<lk::ActivityType>(x.kineto_type), r.names[x.name_id]);
    const auto external_id = static_cast<int32_t>(x.external_id);  // Kineto's ids are int32
    act->startTime = x.start_ns;
    act->endTime = x.end_ns;
    act->id = external_id;
    act->device = x.pid;
    act->resource = x.tid;
    act->threadId = static_cast<int32_t>(x.tid);
    act->flops_ = x.flops;
    act->bytes_ = x.bytes;
    act->exec_id_ = x.exec_id;
    act->device_ = x.device;
    act->stream_ = x.stream;
    act->corr_ = x.correlation;
    if (x.args_id >= 0) {
      act->table_ = r.args;
      act->extra_ = &(*r.args)[x.args_id];
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
          auto it = parents->find(static_cast<uint64_t>(corr));
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
