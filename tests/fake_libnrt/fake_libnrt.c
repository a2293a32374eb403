/* A stand-in for libnrt's system-trace API, built by the test suite (gcc -shared -fPIC).
 *
 * It exports the nrt_sys_trace_* symbols with the documented signatures and semantics
 * (docs/runtime-events.md): capture only between start and stop, per-core and
 * per-event-type selection, a bounded ring buffer per core that drops the oldest event, events
 * handed out once by fetch, optional per-core and max-count fetch options, NRT_STATUS codes.
 * Tests feed it events with fake_nrt_record() and inject failures with fake_nrt_fail().
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int NRT_STATUS;
enum { NRT_SUCCESS = 0, NRT_FAILURE = 1, NRT_INVALID = 2, NRT_RESOURCE = 4 };

#define MAX_NC 8
#define MAX_TYPES 64

/* The types the public description names explicitly (libnrt 2.31 has 46; the rest are named
 * only in words there, so tests use them only as unknown types). */
static const char *k_types[] = {
    "nc_exec_running", "cc_running", "cc_exec_barrier", "numerical_err", "nrt_model_switch",
    "timestamp_sync_point", "hw_notify", "nrt_execute", "nrta_execute_schedule",
    "nrt_model_submit", "kbl_exec_pre", "kbl_exec_wait", "kbl_exec_post", "nrt_tensor_read",
    "nrt_tensor_write", "nrt_tensor_allocate", "nrt_tensor_free", "dmem_buf_copyin",
    "dmem_buf_copyout", "nrt_dma_mem_alloc", "nrt_dma_mem_dealloc",
    "notification_consume_errors", "nrt_profile_add_node_info"};
static const size_t k_ntypes = sizeof(k_types) / sizeof(k_types[0]);

typedef struct {
  uint64_t max_events_per_nc;
  bool nc_enabled[MAX_NC];
  bool nc_any_set;
  bool type_enabled[MAX_TYPES];
} nrt_sys_trace_config_t;

typedef struct {
  int64_t nc_idx; /* -1: all */
  uint64_t max_events_per_nc; /* 0: all */
} nrt_sys_trace_fetch_options_t;

typedef struct {
  char **events; /* ring of JSON objects */
  uint64_t cap, head, count, dropped;
} ring_t;

static bool g_started = false;
static nrt_sys_trace_config_t g_cfg;
static ring_t g_rings[MAX_NC];
static char g_fail_name[128];
static NRT_STATUS g_fail_status = 0;

static NRT_STATUS injected(const char *name) {
  if (g_fail_status != 0 && strcmp(name, g_fail_name) == 0) {
    return g_fail_status;
  }
  return NRT_SUCCESS;
}
#define CHECK_FAIL(name)                 \
  do {                                   \
    NRT_STATUS s_ = injected(name);      \
    if (s_ != NRT_SUCCESS) return s_;    \
  } while (0)

/* ---- test-only controls ---- */
void fake_nrt_fail(const char *name, int status) {
  snprintf(g_fail_name, sizeof g_fail_name, "%s", name ? name : "");
  g_fail_status = status;
}

static int type_index(const char *type) {
  for (size_t i = 0; i < k_ntypes; ++i) {
    if (strcmp(k_types[i], type) == 0) return (int)i;
  }
  return -1;
}

/* Record one event (a JSON object) as the runtime would; returns 1 if captured. */
int fake_nrt_record(uint32_t nc, const char *event_type, const char *json) {
  if (!g_started || nc >= MAX_NC) return 0;
  if (g_cfg.nc_any_set && !g_cfg.nc_enabled[nc]) return 0;
  int t = type_index(event_type);
  if (t >= 0 && !g_cfg.type_enabled[t]) return 0;
  ring_t *r = &g_rings[nc];
  uint64_t slot = (r->head + r->count) % r->cap;
  if (r->count == r->cap) { /* full: drop the oldest */
    free(r->events[r->head]);
    r->head = (r->head + 1) % r->cap;
    r->count--;
    r->dropped++;
    slot = (r->head + r->count) % r->cap;
  }
  r->events[slot] = strdup(json);
  r->count++;
  return 1;
}

uint64_t fake_nrt_dropped(uint32_t nc) { return nc < MAX_NC ? g_rings[nc].dropped : 0; }

/* ---- config ---- */
NRT_STATUS nrt_sys_trace_config_allocate(nrt_sys_trace_config_t **cfg) {
  CHECK_FAIL("nrt_sys_trace_config_allocate");
  if (!cfg) return NRT_INVALID;
  *cfg = calloc(1, sizeof **cfg);
  return *cfg ? NRT_SUCCESS : NRT_RESOURCE;
}

NRT_STATUS nrt_sys_trace_config_set_defaults(nrt_sys_trace_config_t *cfg) {
  if (!cfg) return NRT_INVALID;
  memset(cfg, 0, sizeof *cfg);
  cfg->max_events_per_nc = 1000000;
  for (size_t i = 0; i < k_ntypes; ++i) cfg->type_enabled[i] = true;
  return NRT_SUCCESS;
}

void nrt_sys_trace_config_free(nrt_sys_trace_config_t *cfg) { free(cfg); }

void nrt_sys_trace_config_set_max_events_per_nc(nrt_sys_trace_config_t *cfg, uint64_t n) {
  if (cfg) cfg->max_events_per_nc = n;
}

void nrt_sys_trace_config_set_capture_enabled_for_nc(nrt_sys_trace_config_t *cfg, uint32_t nc,
                                                     bool enabled) {
  if (!cfg || nc >= MAX_NC) return;
  cfg->nc_any_set = true;
  cfg->nc_enabled[nc] = enabled;
}

NRT_STATUS nrt_sys_trace_config_set_capture_enabled_for_event_type(nrt_sys_trace_config_t *cfg,
                                                                   const char *type,
                                                                   bool enabled) {
  if (!cfg || !type) return NRT_INVALID;
  int t = type_index(type);
  if (t < 0) return NRT_INVALID;
  cfg->type_enabled[t] = enabled;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_sys_trace_get_event_types(const char ***types, size_t *count) {
  if (!types || !count) return NRT_INVALID;
  const char **out = malloc(k_ntypes * sizeof *out);
  for (size_t i = 0; i < k_ntypes; ++i) out[i] = strdup(k_types[i]);
  *types = out;
  *count = k_ntypes;
  return NRT_SUCCESS;
}

void nrt_sys_trace_free_event_types(const char **types, size_t count) {
  for (size_t i = 0; i < count; ++i) free((void *)types[i]);
  free(types);
}

/* ---- lifecycle ---- */
static void clear_rings(void) {
  for (int nc = 0; nc < MAX_NC; ++nc) {
    ring_t *r = &g_rings[nc];
    for (uint64_t i = 0; i < r->count; ++i) free(r->events[(r->head + i) % r->cap]);
    free(r->events);
    memset(r, 0, sizeof *r);
  }
}

NRT_STATUS nrt_sys_trace_start(const nrt_sys_trace_config_t *cfg) {
  CHECK_FAIL("nrt_sys_trace_start");
  if (!cfg || cfg->max_events_per_nc == 0) return NRT_INVALID;
  if (g_started) return NRT_FAILURE; /* already started */
  clear_rings();
  g_cfg = *cfg;
  for (int nc = 0; nc < MAX_NC; ++nc) {
    g_rings[nc].cap = cfg->max_events_per_nc;
    g_rings[nc].events = calloc(cfg->max_events_per_nc, sizeof(char *));
  }
  g_started = true;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_sys_trace_stop(void) {
  CHECK_FAIL("nrt_sys_trace_stop");
  if (!g_started) return NRT_FAILURE;
  g_started = false;
  clear_rings();
  return NRT_SUCCESS;
}

/* ---- fetch ---- */
NRT_STATUS nrt_sys_trace_fetch_options_allocate(nrt_sys_trace_fetch_options_t **o) {
  if (!o) return NRT_INVALID;
  *o = calloc(1, sizeof **o);
  (*o)->nc_idx = -1;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_sys_trace_fetch_options_set_defaults(nrt_sys_trace_fetch_options_t *o) {
  if (!o) return NRT_INVALID;
  o->nc_idx = -1;
  o->max_events_per_nc = 0;
  return NRT_SUCCESS;
}

void nrt_sys_trace_fetch_options_free(nrt_sys_trace_fetch_options_t *o) { free(o); }

NRT_STATUS nrt_sys_trace_fetch_options_set_max_events_per_nc(nrt_sys_trace_fetch_options_t *o,
                                                             uint64_t n) {
  if (!o) return NRT_INVALID;
  o->max_events_per_nc = n;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_sys_trace_fetch_options_set_nc_idx(nrt_sys_trace_fetch_options_t *o, uint64_t nc) {
  if (!o || nc >= MAX_NC) return NRT_INVALID;
  o->nc_idx = (int64_t)nc;
  return NRT_SUCCESS;
}

NRT_STATUS nrt_sys_trace_fetch_events(char **buffer, size_t *written,
                                      const nrt_sys_trace_fetch_options_t *o) {
  CHECK_FAIL("nrt_sys_trace_fetch_events");
  if (!buffer || !written) return NRT_INVALID;
  if (!g_started) return NRT_FAILURE;
  size_t cap = 64, len = 0;
  for (int nc = 0; nc < MAX_NC; ++nc) {
    for (uint64_t i = 0; i < g_rings[nc].count; ++i)
      cap += strlen(g_rings[nc].events[(g_rings[nc].head + i) % g_rings[nc].cap]) + 1;
  }
  char *out = malloc(cap);
  len += (size_t)sprintf(out, "{\"events\": [");
  bool first = true;
  for (int nc = 0; nc < MAX_NC; ++nc) {
    if (o && o->nc_idx >= 0 && o->nc_idx != nc) continue;
    ring_t *r = &g_rings[nc];
    uint64_t take = r->count;
    if (o && o->max_events_per_nc > 0 && o->max_events_per_nc < take) take = o->max_events_per_nc;
    for (uint64_t i = 0; i < take; ++i) { /* handed out once: consumed from the ring */
      char *ev = r->events[r->head];
      if (!first) out[len++] = ',';
      first = false;
      size_t n = strlen(ev);
      memcpy(out + len, ev, n);
      len += n;
      free(ev);
      r->events[r->head] = NULL;
      r->head = (r->head + 1) % r->cap;
      r->count--;
    }
  }
  len += (size_t)sprintf(out + len, "], \"data_version\": 2}");
  *buffer = out;
  *written = len;
  return NRT_SUCCESS;
}

void nrt_sys_trace_buffer_free(char *buffer) { free(buffer); }

#ifndef FAKE_NO_VERSION
/* nrt_get_version (nrt/nrt_version.h): optional for the collector; -DFAKE_NO_VERSION leaves
 * it out, as an older runtime might. */
typedef struct nrt_version {
  uint64_t rt_major, rt_minor, rt_patch, rt_maintenance;
  char rt_detail[128];
  char git_hash[64];
} nrt_version_t;

NRT_STATUS nrt_get_version(nrt_version_t *ver, size_t size) {
  if (!ver || size < sizeof *ver) return NRT_INVALID;
  memset(ver, 0, sizeof *ver);
  ver->rt_major = 2;
  ver->rt_minor = 31;
  ver->rt_patch = 22;
  snprintf(ver->rt_detail, sizeof ver->rt_detail, "fake_libnrt");
  snprintf(ver->git_hash, sizeof ver->git_hash, "0000000");
  return NRT_SUCCESS;
}
#endif

/* ---- device memory (test-only control) ----
 * The runtime's own bookkeeping of device memory per core and usage type, kept whether or not a
 * capture runs (memory allocated before a capture stays in its totals). Each call is recorded as
 * the runtime reports it (docs/runtime-events.md): an nrt_dma_mem_alloc / _dealloc start carrying
 * the intent (hbm_idx, is_nc_hbm, usage_type), then a stop carrying the result (allocated_bytes
 * or freed_bytes, then total_bytes and usage_type_total_bytes after the call). */
#define MAX_USAGE 16
static char g_usage[MAX_USAGE][32];
static size_t g_nusage = 0;
static uint64_t g_usage_bytes[MAX_NC][MAX_USAGE];
static uint64_t g_mem_total[MAX_NC];
static uint64_t g_mem_tracking = 1;

static int usage_index(const char *usage) {
  for (size_t i = 0; i < g_nusage; ++i) {
    if (strcmp(g_usage[i], usage) == 0) return (int)i;
  }
  if (g_nusage == MAX_USAGE) return -1;
  snprintf(g_usage[g_nusage], sizeof g_usage[0], "%s", usage);
  return (int)g_nusage++;
}

/* Allocate (bytes > 0) or free (bytes < 0) on core nc at ts_ns: returns the core's total in use
 * after the call, or -1 for a bad core, usage type or a free of more than is held. */
int64_t fake_nrt_dma_mem(uint32_t nc, const char *usage, int64_t bytes, uint64_t ts_ns) {
  int u = (nc < MAX_NC && usage) ? usage_index(usage) : -1;
  if (u < 0 || (bytes < 0 && (uint64_t)(-bytes) > g_usage_bytes[nc][u])) return -1;
  g_usage_bytes[nc][u] += (uint64_t)bytes; /* (two's complement: a free subtracts) */
  g_mem_total[nc] += (uint64_t)bytes;
  const char *type = bytes >= 0 ? "nrt_dma_mem_alloc" : "nrt_dma_mem_dealloc";
  uint64_t id = g_mem_tracking++;
  char json[512];
  snprintf(json, sizeof json,
           "{\"event_type\": \"%s\", \"phase\": \"start\", \"tracking_id\": %llu, \"nc_idx\": "
           "%u, \"thread_id\": 1, \"timestamp_ns\": %llu, \"data\": {\"hbm_idx\": 0, "
           "\"is_nc_hbm\": true, \"usage_type\": \"%s\"}}",
           type, (unsigned long long)id, nc, (unsigned long long)ts_ns, usage);
  fake_nrt_record(nc, type, json);
  snprintf(json, sizeof json,
           "{\"event_type\": \"%s\", \"phase\": \"stop\", \"tracking_id\": %llu, \"nc_idx\": "
           "%u, \"thread_id\": 1, \"timestamp_ns\": %llu, \"data\": {\"%s\": %lld, "
           "\"total_bytes\": %llu, \"usage_type_total_bytes\": %llu, "
           "\"physical_address\": \"0x%llx\"}}",
           type, (unsigned long long)id, nc, (unsigned long long)(ts_ns + 1000),
           bytes >= 0 ? "allocated_bytes" : "freed_bytes", (long long)(bytes >= 0 ? bytes : -bytes),
           (unsigned long long)g_mem_total[nc], (unsigned long long)g_usage_bytes[nc][u],
           (unsigned long long)(0x100000000ull + id * 0x1000));
  fake_nrt_record(nc, type, json);
  return (int64_t)g_mem_total[nc];
}
