// The compiled launch path of torch.ops.axe.* (axe/torch/fast_ops.py builds and loads this file).
//
// One boxed kernel serves every op registered through axe_fast_register, for the CPU and CUDA
// dispatch keys.  Per call it computes the call signature (every tensor argument's dtype, device,
// sizes and strides; every scalar's value) and looks it up in the op's table:
//
// - hit, every data pointer aligned as the plan demands (and the plan's distinct tensors
//   distinct): allocate the outputs, write the pointers into a parameter array on the stack,
//   point the plan's tensor maps at their tensors (cuTensorMapReplaceAddress, where one moved),
//   one cuLaunchKernel on torch's current stream of the tensors' device; the GIL is never taken.
//   A kernel built programmatic (Ax.cuda.programmatic_launch: it waits for its predecessor
//   itself) is launched with cuLaunchKernelEx and programmatic stream serialization, so it may
//   start before the kernel before it ends (a graph captures that as a programmatic edge) -
//   unless AXE_PROGRAMMATIC_LAUNCH=0 when the call is made (read per call, as the Python path
//   reads it per plan: a benchmark flips it between timings);
//   A plan with scratch (split-K partials, stream-K flags) holds the scratch set of the stream it
//   was made on: a call on another stream, or while that stream captures a graph (the Python
//   path keeps a captured set for the process), is refused;
// - otherwise (a new signature, a misaligned view, no driver, a launch the driver refused): the
//   op's checked Python implementation, registered as axe_checked::<op>, through the dispatcher
//   (which takes the GIL).  It runs every check and launches; where it planned the signature it
//   hands the plan here (axe_fast_submit, matched to this call by the thread's pending key) and
//   the table keeps it once the call returned.
//
// Law (axe/runtime/plan.py's): a hit launches exactly what the Python LaunchPlan of that
// signature launches for the same tensors - function, grid, block, shared memory and parameter
// bytes, tensor maps included - because the plan's fields are copied from it.
//
// Python reaches the table through the extern "C" functions at the end (ctypes): no pybind11,
// no libpython, no libtorch_python, no libcuda or libc10_cuda at link time (the driver's
// cuLaunchKernel, cuLaunchKernelEx, cuTensorMapReplaceAddress and cuStreamIsCapturing are dlsym'd
// at first use, cuLaunchKernelEx's structures mirrored below; the stream comes through c10's device
// guard interface).

#include <dlfcn.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                         void**);
using ReplaceFn = int (*)(void* map, void* address);           // cuTensorMapReplaceAddress

// cuda.h's CUlaunchAttribute (an id, padding to 8 bytes, a 64-byte value union) and CUlaunchConfig,
// as far as a programmatic launch fills them (tests/test_torch_fast_ops.py checks the layout
// against cuda.h where the toolkit is installed).
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
  } value;
};
struct LaunchConfig {
  unsigned grid[3], block[3], smem;
  void* stream;
  LaunchAttribute* attrs;
  unsigned num_attrs;
};
static_assert(sizeof(LaunchAttribute) == 72 && sizeof(LaunchConfig) == 56, "cuda.h's launch structures");
constexpr int kProgrammaticStreamSerialization = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
using LaunchExFn = int (*)(const LaunchConfig* config, void* f, void** params, void** extra);  // cuLaunchKernelEx
using CapturingFn = int (*)(void* stream, int* status);        // cuStreamIsCapturing

// A call signature, flattened: per argument a tag, then what the op's checks depend on.
using Key = std::vector<int64_t>;

struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Output {
  int like;                     // the argument whose dtype and device it takes
  std::vector<int64_t> shape;   // fixed by the signature
};

// A CUtensorMap: 128 bytes, 64-byte aligned (the driver and the kernel's parameter demand it).
struct alignas(64) TensorMap {
  char bytes[128];
};

// A slot's source that is none of the call's tensors: the plan's scratch (a fixed pointer).
constexpr int kFixed = std::numeric_limits<int>::min();
constexpr int64_t kFixedWord = -(int64_t{1} << 40);  // how a record says so

// What one checked signature launches (copied from its Python LaunchPlan, see axe_fast_submit).
struct Plan {
  void* func = nullptr;
  unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, smem = 0;
  bool programmatic = false;     // the kernel waits for its predecessor itself (griddepcontrol.wait)
  std::vector<char> scalars;     // the scalar parameters' bytes
  // per kernel parameter: >= 0 its offset in scalars; -(slot + 1) for slot < S; -(S + 1 + j): map j
  std::vector<int64_t> params;
  std::vector<int> sources;      // per slot: an argument's position (>= 0), -(output + 1), or kFixed
  std::vector<uint64_t> fixed;   // per slot: its pointer where its source is kFixed
  void* stream = nullptr;        // the stream the fixed pointers (scratch) belong to
  bool has_fixed = false;        // some fixed pointer is read (not 0): the plan fits that stream alone
  std::vector<int> map_slots;    // per tensor map: the slot whose tensor it describes
  // the maps and the addresses they hold: rewritten per call under map_lock (a const Plan is
  // shared by every thread; the driver copies the parameters at launch, so a map may be
  // rewritten as soon as the launch that read it returned)
  mutable std::unique_ptr<TensorMap[]> maps;
  mutable std::vector<uint64_t> map_ptrs;
  mutable std::mutex map_lock;
  std::vector<uint64_t> masks;   // per slot: alignment - 1
  std::vector<Output> outputs;
  std::vector<std::pair<int, int>> distinct;  // argument positions whose data pointers must differ
  bool empty() const { return grid[0] == 0 || grid[1] == 0 || grid[2] == 0; }
};

using PlanPtr = std::shared_ptr<const Plan>;

struct Op {
  Op(std::string name, c10::OperatorHandle checked) : name(std::move(name)), checked(std::move(checked)) {}
  std::string name;
  c10::OperatorHandle checked;
  std::unordered_map<Key, PlanPtr, KeyHash> plans;
};

std::shared_mutex table_mutex;           // writers: submit, clear; readers: every call
std::vector<std::unique_ptr<Op>> ops;    // by op id; only appended to (ids stay valid)
std::atomic<bool> enabled{true};
std::atomic<int64_t> plan_limit{1024};
std::atomic<LaunchFn> launch_override{nullptr};
std::atomic<LaunchExFn> launch_ex_override{nullptr};
std::atomic<ReplaceFn> replace_override{nullptr};
std::atomic<int64_t> hits{0}, misses{0}, refused{0};
thread_local std::string last_error;
std::mutex refusal_mutex;
std::string refusal;  // why the last refused launch was refused

// A hit that could not be launched here (the checked path takes it and reports in words).
bool refuse(const std::string& why) {
  refused.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(refusal_mutex);
  refusal = why;
  return false;
}

// The call whose checked implementation runs on this thread now: its op and key, and the plan
// the implementation handed over.
struct Pending {
  int op = -1;
  Key key;
  std::shared_ptr<Plan> plan;
};
thread_local Pending pending;

}  // namespace

// Calls of any thread whose checked implementation runs now (Python reads it through ctypes
// before handing over a plan it did not make: usually none is pending, and asking costs a call).
extern "C" std::atomic<int> axe_fast_pending_calls{0};

namespace {

// libcuda's function `name`, or nullptr where the library or the function is absent.
void* driver_symbol(const char* name) {
  static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  return lib ? dlsym(lib, name) : nullptr;
}

LaunchFn driver_launch() {
  LaunchFn fn = launch_override.load(std::memory_order_acquire);
  if (fn) return fn;
  static LaunchFn found = reinterpret_cast<LaunchFn>(driver_symbol("cuLaunchKernel"));
  return found;
}

LaunchExFn driver_launch_ex() {
  LaunchExFn fn = launch_ex_override.load(std::memory_order_acquire);
  if (fn) return fn;
  static LaunchExFn found = reinterpret_cast<LaunchExFn>(driver_symbol("cuLaunchKernelEx"));
  return found;
}

// axe.runtime.launcher.programmatic_launch_enabled's switch: anything but AXE_PROGRAMMATIC_LAUNCH=0.
bool programmatic_enabled() {
  const char* v = std::getenv("AXE_PROGRAMMATIC_LAUNCH");
  return !(v && std::strcmp(v, "0") == 0);
}

ReplaceFn driver_replace() {
  ReplaceFn fn = replace_override.load(std::memory_order_acquire);
  if (fn) return fn;
  static ReplaceFn found = reinterpret_cast<ReplaceFn>(driver_symbol("cuTensorMapReplaceAddress"));
  return found;
}

// Whether `stream` captures a graph now (true where the driver cannot say: the caller refuses).
bool capturing(void* stream) {
  static CapturingFn fn = reinterpret_cast<CapturingFn>(driver_symbol("cuStreamIsCapturing"));
  int status = 0;
  return !fn || fn(stream, &status) != 0 || status != 0;  // 0: CU_STREAM_CAPTURE_STATUS_NONE
}

enum Tag : int64_t { kTensor = 1, kNone, kDouble, kInt, kBool };

// The signature of args into key; false where an argument is of a kind no plan is kept for.
bool make_key(c10::ArrayRef<c10::IValue> args, Key& key) {
  key.clear();
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.layout() != c10::kStrided) return false;
      const int64_t dim = t.dim();
      key.push_back(kTensor);
      key.push_back(static_cast<int64_t>(t.scalar_type()));
      key.push_back(static_cast<int64_t>(t.device().type()));
      key.push_back(t.device().index());
      key.push_back(dim);
      const auto sizes = t.sizes();
      const auto strides = t.strides();
      key.insert(key.end(), sizes.begin(), sizes.end());
      key.insert(key.end(), strides.begin(), strides.end());
    } else if (v.isNone()) {
      key.push_back(kNone);
    } else if (v.isDouble()) {
      double d = v.toDouble();
      int64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      key.push_back(kDouble);
      key.push_back(bits);
    } else if (v.isBool()) {
      key.push_back(kBool);
      key.push_back(v.toBool());
    } else if (v.isInt()) {
      key.push_back(kInt);
      key.push_back(v.toInt());
    } else {
      return false;
    }
  }
  return true;
}

// Restores the device that was current, where a launch had to switch.
struct DeviceSwitch {
  const c10::impl::DeviceGuardImplInterface* impl = nullptr;
  c10::Device previous{c10::DeviceType::CPU};
  DeviceSwitch(const c10::impl::DeviceGuardImplInterface* i, c10::Device want) {
    c10::Device cur = i->getDevice();
    if (cur != want) {
      impl = i;
      previous = i->exchangeDevice(want);
    }
  }
  ~DeviceSwitch() {
    if (impl) impl->uncheckedSetDevice(previous);
  }
};

constexpr size_t kMaxSlots = 16, kMaxParams = 64;

// Launch plan p on the arguments at the top of stack; on success the arguments are replaced by
// the outputs.  False (the stack untouched) where the checked path must take the call.
bool launch(const Plan& p, torch::jit::Stack* stack, size_t n) {
  c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, n);
  const size_t slots = p.sources.size();
  if (slots > kMaxSlots || p.params.size() > kMaxParams) return false;
  uint64_t ptrs[kMaxSlots];
  const at::Tensor* first = nullptr;
  for (size_t s = 0; s < slots; ++s) {
    int src = p.sources[s];
    if (src == kFixed) {
      ptrs[s] = p.fixed[s];
      continue;
    }
    if (src < 0) continue;
    const at::Tensor& t = args[src].toTensor();
    ptrs[s] = reinterpret_cast<uint64_t>(t.data_ptr());
    if (ptrs[s] & p.masks[s]) return false;  // a misaligned view: the checked path copies it
    if (!first) first = &t;
  }
  for (const auto& [a, b] : p.distinct)
    if (args[a].toTensor().data_ptr() == args[b].toTensor().data_ptr()) return false;
  if (!first) return false;
  const c10::Device device = first->device();
  const bool programmatic = p.programmatic && programmatic_enabled();
  const char* launcher = programmatic ? "cuLaunchKernelEx" : "cuLaunchKernel";
  LaunchFn fn = nullptr;
  LaunchExFn fn_ex = nullptr;
  void* stream = nullptr;  // a CPU tensor (a test's stand-in driver): stream 0
  std::optional<DeviceSwitch> on;
  if (!p.empty()) {
    if (programmatic)
      fn_ex = driver_launch_ex();
    else
      fn = driver_launch();
    if (!fn && !fn_ex) return refuse(std::string("libcuda.so.1 or its ") + launcher + " is not found");
    if (device.is_cuda()) {
      const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
      on.emplace(impl, device);  // the function belongs to that device's context
      try {  // a torch whose CUDA guard has no native stream handle throws here
        stream = impl->getStream(device).native_handle();
      } catch (const std::exception& e) {
        return refuse(std::string("torch's current stream has no native handle: ") + e.what());
      }
    }
    if (p.has_fixed) {  // the scratch set belongs to one stream, and is kept for a graph by Python
      if (stream != p.stream) return refuse("the plan's scratch belongs to another stream");
      if (device.is_cuda() && capturing(stream)) return refuse("the stream captures a graph (or cannot say)");
    }
  }
  c10::SmallVector<at::Tensor, 2> outs;
  for (const Output& o : p.outputs) outs.push_back(at::empty(o.shape, args[o.like].toTensor().options()));
  for (size_t s = 0; s < slots; ++s) {
    int src = p.sources[s];
    if (src >= 0 || src == kFixed) continue;
    ptrs[s] = reinterpret_cast<uint64_t>(outs[-src - 1].data_ptr());
    if (ptrs[s] & p.masks[s]) return false;
  }
  if (!p.empty()) {
    const int64_t nslots = static_cast<int64_t>(slots);
    void* params[kMaxParams];
    for (size_t i = 0; i < p.params.size(); ++i) {
      int64_t at = p.params[i];
      params[i] = at >= 0        ? const_cast<char*>(p.scalars.data() + at)
                  : at >= -nslots ? static_cast<void*>(&ptrs[-at - 1])
                                  : static_cast<void*>(p.maps[-at - nslots - 1].bytes);
    }
    std::unique_lock<std::mutex> maps;
    if (!p.map_slots.empty()) maps = std::unique_lock<std::mutex>(p.map_lock);
    for (size_t j = 0; j < p.map_slots.size(); ++j) {
      const uint64_t ptr = ptrs[p.map_slots[j]];
      if (ptr == p.map_ptrs[j]) continue;
      if (ptr & 15) return false;  // a map needs 16-byte alignment: the checked path says so
      ReplaceFn replace = driver_replace();
      if (!replace) return refuse("libcuda.so.1 or its cuTensorMapReplaceAddress is not found");
      int r = replace(p.maps[j].bytes, reinterpret_cast<void*>(ptr));
      if (r != 0) return refuse("cuTensorMapReplaceAddress returned " + std::to_string(r));
      p.map_ptrs[j] = ptr;
    }
    int result;
    if (programmatic) {
      LaunchAttribute attr{};
      attr.id = kProgrammaticStreamSerialization;
      attr.value.programmatic_stream_serialization_allowed = 1;
      const LaunchConfig config{{p.grid[0], p.grid[1], p.grid[2]}, {p.block[0], p.block[1], p.block[2]}, p.smem,
                                stream, &attr, 1};
      result = fn_ex(&config, p.func, params, nullptr);
    } else {
      result = fn(p.func, p.grid[0], p.grid[1], p.grid[2], p.block[0], p.block[1], p.block[2], p.smem, stream, params,
                  nullptr);
    }
    // refused (no context on this thread, an earlier kernel's fault...): nothing was launched,
    // and the checked path launches again and reports the error in words
    if (result != 0) return refuse(std::string(launcher) + " returned " + std::to_string(result));
  }
  torch::jit::drop(*stack, n);
  for (at::Tensor& t : outs) torch::jit::push(*stack, std::move(t));
  return true;
}

// This thread's pending call for the scope's duration; the one before it (an op whose checked
// implementation called another op) afterwards.
struct PendingScope {
  Pending outer;
  PendingScope(int op, Key&& key) : outer(std::move(pending)) {
    pending = Pending{op, std::move(key), nullptr};
    axe_fast_pending_calls.fetch_add(1);
  }
  ~PendingScope() {
    axe_fast_pending_calls.fetch_sub(1);
    pending = std::move(outer);
  }
};

void remember(Op& op, Key key, std::shared_ptr<Plan> plan) {
  std::unique_lock<std::shared_mutex> lock(table_mutex);
  if (!enabled.load(std::memory_order_relaxed)) return;
  if (static_cast<int64_t>(op.plans.size()) >= plan_limit.load(std::memory_order_relaxed)) op.plans.clear();
  op.plans[std::move(key)] = std::move(plan);
}

struct Kernel final : c10::OperatorKernel {
  Kernel(int id, Op* op) : id(id), op(*op) {}
  int id;
  Op& op;  // owned by ops, never freed

  void operator()(const c10::OperatorHandle& handle, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t n = handle.schema().arguments().size();
    Key key;
    if (!enabled.load(std::memory_order_relaxed) || !make_key(torch::jit::last(*stack, n), key)) {
      op.checked.callBoxed(stack);
      return;
    }
    PlanPtr plan;
    {
      std::shared_lock<std::shared_mutex> lock(table_mutex);
      auto it = op.plans.find(key);
      if (it != op.plans.end()) plan = it->second;
    }
    if (plan && launch(*plan, stack, n)) {
      hits.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    misses.fetch_add(1, std::memory_order_relaxed);
    PendingScope scope(id, std::move(key));
    op.checked.callBoxed(stack);
    if (pending.plan) remember(op, std::move(pending.key), std::move(pending.plan));
  }
};

// Reads axe_fast_submit's record (the format is stated there); nullptr where it is malformed.
std::shared_ptr<Plan> parse(const int64_t* rec, int64_t n, const char* bytes, int64_t nbytes, size_t nargs) {
  auto p = std::make_shared<Plan>();
  int64_t i = 0;
  auto next = [&](int64_t& v) {
    if (i >= n) return false;
    v = rec[i++];
    return true;
  };
  int64_t v, count;
  if (!next(v)) return nullptr;
  p->func = reinterpret_cast<void*>(static_cast<uintptr_t>(v));
  for (unsigned* d : {&p->grid[0], &p->grid[1], &p->grid[2], &p->block[0], &p->block[1], &p->block[2], &p->smem}) {
    if (!next(v) || v < 0 || v > UINT32_MAX) return nullptr;
    *d = static_cast<unsigned>(v);
  }
  if (!next(v) || (v != 0 && v != 1)) return nullptr;
  p->programmatic = v != 0;
  if (!next(count) || count < 0 || static_cast<size_t>(count) > kMaxParams) return nullptr;
  if (!next(v)) return nullptr;  // the slot count, read first so that parameters can be checked against it
  const int64_t slots = v;
  if (slots < 0 || static_cast<size_t>(slots) > kMaxSlots) return nullptr;
  int64_t map_params = 0;  // the most maps a parameter names (checked against the maps' count)
  for (int64_t k = 0; k < count; ++k) {
    if (!next(v) || v >= nbytes || v < -slots - static_cast<int64_t>(kMaxParams)) return nullptr;
    if (v < -slots) map_params = std::max(map_params, -v - slots);
    p->params.push_back(v);
  }
  int outputs = 0, fixed = 0;
  for (int64_t s = 0; s < slots; ++s) {
    int64_t src, align;
    if (!next(src) || !next(align) || align <= 0 || (align & (align - 1))) return nullptr;
    if (src >= static_cast<int64_t>(nargs) || (src < -static_cast<int64_t>(kMaxSlots) && src != kFixedWord))
      return nullptr;
    if (src == kFixedWord) {
      ++fixed;
      p->sources.push_back(kFixed);
    } else {
      if (src < 0) outputs = std::max<int>(outputs, static_cast<int>(-src));
      p->sources.push_back(static_cast<int>(src));
    }
    p->masks.push_back(static_cast<uint64_t>(align - 1));
  }
  if (!next(count) || count != outputs) return nullptr;
  for (int64_t k = 0; k < count; ++k) {
    Output o;
    int64_t like, dim;
    if (!next(like) || like < 0 || like >= static_cast<int64_t>(nargs) || !next(dim) || dim < 0) return nullptr;
    o.like = static_cast<int>(like);
    for (int64_t d = 0; d < dim; ++d) {
      if (!next(v) || v < 0) return nullptr;
      o.shape.push_back(v);
    }
    p->outputs.push_back(std::move(o));
  }
  if (!next(count) || count < 0) return nullptr;
  for (int64_t k = 0; k < count; ++k) {
    int64_t a, b;
    if (!next(a) || !next(b) || a < 0 || b < 0 || a >= static_cast<int64_t>(nargs) || b >= static_cast<int64_t>(nargs))
      return nullptr;
    p->distinct.emplace_back(static_cast<int>(a), static_cast<int>(b));
  }
  if (!next(v)) return nullptr;
  p->stream = reinterpret_cast<void*>(static_cast<uintptr_t>(v));
  if (!next(count) || count != fixed) return nullptr;
  p->fixed.assign(slots, 0);
  for (int64_t s = 0; s < slots; ++s) {
    if (p->sources[s] != kFixed) continue;
    if (!next(v)) return nullptr;
    p->fixed[s] = static_cast<uint64_t>(v);
    p->has_fixed = p->has_fixed || v != 0;
  }
  if (!next(count) || count < map_params || count > static_cast<int64_t>(kMaxParams)) return nullptr;
  p->maps.reset(new TensorMap[count]);
  for (int64_t j = 0; j < count; ++j) {
    int64_t slot;
    if (!next(slot) || slot < 0 || slot >= slots || !next(v)) return nullptr;
    p->map_slots.push_back(static_cast<int>(slot));
    p->map_ptrs.push_back(static_cast<uint64_t>(v));
    for (int w = 0; w < 16; ++w) {
      int64_t word;
      if (!next(word)) return nullptr;
      std::memcpy(p->maps[j].bytes + 8 * w, &word, 8);
    }
  }
  if (i != n) return nullptr;
  p->scalars.assign(bytes, bytes + nbytes);
  return p;
}

}  // namespace

extern "C" {

// The error of this thread's last failed call, in words.
const char* axe_fast_error() { return last_error.c_str(); }

// Registers the compiled kernel as axe::<op>'s CPU and CUDA kernel; a miss calls
// <checked_ns>::<op> (same schema, the Python implementation).  Returns the op's id, or -1 (see
// axe_fast_error).  The registrations live as long as the process (Library objects never freed:
// no teardown order to get wrong at exit).
int axe_fast_register(const char* name, const char* checked_ns) {
  try {
    auto checked = c10::Dispatcher::singleton().findSchema({std::string(checked_ns) + "::" + name, ""});
    if (!checked) throw std::runtime_error(std::string(checked_ns) + "::" + name + " is not defined");
    auto op = std::make_unique<Op>(name, *checked);
    int id;
    Op* raw = op.get();
    {
      std::unique_lock<std::shared_mutex> lock(table_mutex);
      id = static_cast<int>(ops.size());
      ops.push_back(std::move(op));
    }
    for (c10::DispatchKey k : {c10::DispatchKey::CPU, c10::DispatchKey::CUDA}) {
      auto* lib = new torch::Library(torch::Library::IMPL, "axe", k, __FILE__, __LINE__);
      lib->impl(name, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(id, raw)));
    }
    return id;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

// Hands the checked implementation's plan of the call now checked on this thread (op `name`) to
// the table.  The record `rec` (int64 words):
//   func, grid x y z, block x y z, dynamic shared memory, programmatic (1: the kernel waits for
//     its predecessor itself; 0), P, S, then
//   P words: per kernel parameter its offset in `bytes` (>= 0), -(slot + 1), or -(S + 1 + j) for
//     tensor map j,
//   S pairs: per slot (the kernel's tensor arguments, in its signature's order) its source - an
//     argument's position, -(k + 1) for output k, or -2^40 for a fixed pointer (the scratch) -
//     and its alignment in bytes,
//   O, per output: the argument whose dtype and device it takes, its rank, its sizes,
//   D, D pairs of argument positions whose data pointers must differ,
//   the stream the fixed pointers belong to (a call on another stream is refused),
//   F (the number of fixed slots), F words: their pointers, in slot order (0: a slot no parameter
//     reads - scratch this configuration does not use; a plan whose are all 0 fits every stream),
//   T, per tensor map: the slot whose tensor it describes, the address it holds, 16 words (its
//     128 bytes: the address is replaced by cuTensorMapReplaceAddress when that tensor moved).
// Returns 1 (kept, once the call returns), 0 (no such call is being checked on this thread:
// nothing to key it by), -1 (a malformed record).
int axe_fast_submit(const char* name, const int64_t* rec, int64_t n, const char* bytes, int64_t nbytes) {
  if (pending.op < 0) return 0;
  size_t nargs;
  {
    std::shared_lock<std::shared_mutex> lock(table_mutex);
    const Op& op = *ops[pending.op];
    if (op.name != name) return 0;
    nargs = op.checked.schema().arguments().size();
  }
  auto plan = parse(rec, n, bytes, nbytes, nargs);
  if (!plan) {
    last_error = std::string("malformed plan record for axe::") + name;
    return -1;
  }
  pending.plan = std::move(plan);
  return 1;
}

// Whether calls look plans up (false: every call takes the checked path; no plan is kept).
void axe_fast_enable(int on) { enabled.store(on != 0); }

// At most `limit` plans per op (then that op's are forgotten all at once).
void axe_fast_set_limit(int64_t limit) { plan_limit.store(limit); }

// Forgets every op's plans.
void axe_fast_clear() {
  std::unique_lock<std::shared_mutex> lock(table_mutex);
  for (auto& op : ops) op->plans.clear();
}

// Why the last refused hit was refused ("" where none was); valid until the next call.
const char* axe_fast_refusal() {
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(refusal_mutex);
  copy = refusal;
  return copy.c_str();
}

// Launch through `fn` (cuLaunchKernel's signature) and `fn_ex` (cuLaunchKernelEx's: programmatic
// plans) and move tensor maps through `replace` (cuTensorMapReplaceAddress's) instead of libcuda's;
// nullptr: libcuda's again.
void axe_fast_set_launch(void* fn, void* replace, void* fn_ex) {
  launch_override.store(reinterpret_cast<LaunchFn>(fn));
  launch_ex_override.store(reinterpret_cast<LaunchExFn>(fn_ex));
  replace_override.store(reinterpret_cast<ReplaceFn>(replace));
}

// out[0..4): calls launched here, calls sent to the checked path, plans kept (all ops), hits
// refused (no driver, no stream handle, the driver's error, scratch of another stream or a
// capturing one: see axe_fast_refusal).
void axe_fast_counts(int64_t* out) {
  out[0] = hits.load();
  out[1] = misses.load();
  out[3] = refused.load();
  std::shared_lock<std::shared_mutex> lock(table_mutex);
  int64_t plans = 0;
  for (auto& op : ops) plans += static_cast<int64_t>(op->plans.size());
  out[2] = plans;
}

}  // extern "C"
