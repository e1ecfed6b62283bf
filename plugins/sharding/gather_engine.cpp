// gather_engine.cpp — all-gathering and releasing wrap groups (see
// gather_engine.h).
#include "gather_engine.h"

#include <accel/sdk/error.hpp>

#include <algorithm>
#include <deque>
#include <exception>

namespace accel::sharding {

namespace {

constexpr DLDataType kBytes{kDLUInt, 8, 1};

int64_t element_bytes(DLDataType t) { return (t.bits * t.lanes + 7) / 8; }

// A 1-D view of `count` elements of `dtype` starting `byte_offset` bytes
// into `base` (a packet of bytes read as codes or values, or a parameter
// dtype buffer read at an element offset).
class TypedView {
 public:
  TypedView(const DLTensor& base, int64_t byte_offset, DLDataType dtype, int64_t count) : shape_(count) {
    view_ = base;
    view_.ndim = 1;
    view_.dtype = dtype;
    view_.shape = &shape_;
    view_.strides = &stride_;
    view_.byte_offset = base.byte_offset + static_cast<uint64_t>(byte_offset);
  }
  TypedView(const TypedView&) = delete;
  TypedView& operator=(const TypedView&) = delete;
  const DLTensor* get() const noexcept { return &view_; }

 private:
  int64_t shape_;
  int64_t stride_ = 1;
  DLTensor view_{};
};

// The arrays of one encode or decode call, and the views they point to.
struct CodecCall {
  std::deque<TypedView> views;  // stable addresses
  std::vector<int32_t> params;
  std::vector<int64_t> offsets;
  std::vector<const DLTensor*> values;
  std::vector<const DLTensor*> codes;

  void add(const CodecSegment& s, const DLTensor* value, const DLTensor* code) {
    params.push_back(s.param);
    offsets.push_back(s.param_offset);
    values.push_back(value);
    codes.push_back(code);
  }
  AccelGatherCodecArgs args(int32_t unit, uint32_t flags, AccelGroup* group) const {
    AccelGatherCodecArgs a{};
    a.struct_size = sizeof(a);
    a.unit = unit;
    a.flags = flags;
    a.num_slices = static_cast<int32_t>(params.size());
    a.params = params.data();
    a.offsets = offsets.data();
    a.values = values.data();
    a.codes = codes.data();
    a.group = group;
    return a;
  }
};

}  // namespace

GatherEngine::GatherEngine(const sdk::Kernels& ops, const ShardingOptions& config, const GatherPlan& plan,
                           ShardStore& store, sdk::BufferPool& comm_buffers)
    : ops_(ops),
      config_(config),
      plan_(plan),
      store_(store),
      comm_buffers_(comm_buffers),
      state_(plan.groups.size(), State::resharded),
      in_flight_(plan.groups.size()) {
  const AccelHostServices* table = ops_.services().table();
  if (ACCEL_STRUCT_HAS_FIELD(table, AccelHostServices, gather_codec)) codec_services_ = table->gather_codec;
  codecs_.resize(static_cast<size_t>(store_.num_units()));
}

const UnitCodec* GatherEngine::ask_codec(const ShardedUnit& unit, uint32_t codec_flags) {
  if (codec_services_ == nullptr || !ACCEL_HAS_FN(codec_services_, AccelGatherCodecServices, query)) return nullptr;
  const sdk::Services& s = ops_.services();
  std::vector<DLDataType> answer(static_cast<size_t>(unit.layout.num_params), DLDataType{0, 0, 0});
  AccelGatherCodecQueryArgs q{};
  q.struct_size = sizeof(q);
  q.unit = unit.layout.index;
  q.flags = codec_flags;
  q.param_dtype = config_.param_dtype;
  q.num_params = unit.layout.num_params;
  q.code_dtypes = answer.data();
  s.check(codec_services_->query(s.host(), &q), "gather_codec query");
  std::vector<bool> encoded(answer.size(), false);
  bool any = false;
  for (const ParamLayout& p : unit.layout.params) {  // parameters stored in this unit only
    const auto i = static_cast<size_t>(p.index);
    encoded[i] = answer[i].bits != 0;
    any = any || encoded[i];
  }
  if (!any) return nullptr;
  std::unique_ptr<UnitCodec>& cached = codecs_.at(static_cast<size_t>(unit.layout.index));
  if (!cached || cached->encoded != encoded) {
    auto fresh = std::make_unique<UnitCodec>();
    fresh->plan = plan_codec_gather(unit.layout, unit.shards.parts(), encoded, element_bytes(config_.param_dtype));
    fresh->encoded = std::move(encoded);
    cached = std::move(fresh);
  }
  cached->code_dtypes = std::move(answer);
  return cached.get();
}

void GatherEngine::encode(UnitGather& g, const ShardedUnit& unit, const DLTensor& send) {
  const UnitCodec& codec = *g.codec;
  const int64_t param_bytes = element_bytes(config_.param_dtype);
  g.packet_out = comm_buffers_.take(ACCEL_MEMORY_COMM, kBytes, codec.plan.packet_bytes, ACCEL_MEMORY_DEVICE,
                                    "sharding codec packet");
  g.packet_in = comm_buffers_.take(ACCEL_MEMORY_COMM, kBytes, codec.plan.gathered_bytes(), ACCEL_MEMORY_DEVICE,
                                   "sharding codec all_gather");
  CodecCall call;
  const int64_t shard_begin = unit.shard_begin();
  for (const CodecSegment& seg : codec.plan.ranks.at(static_cast<size_t>(unit.shard_index)).segments) {
    const TypedView& value =
        call.views.emplace_back(send, (seg.begin - shard_begin) * param_bytes, config_.param_dtype, seg.numel);
    if (seg.encoded) {
      const DLDataType code_dtype = codec.code_dtypes.at(static_cast<size_t>(seg.param));
      call.add(seg, value.get(),
               call.views.emplace_back(g.packet_out.tensor(), seg.packet_offset, code_dtype, seg.numel).get());
    } else {
      const TypedView packed(g.packet_out.tensor(), seg.packet_offset, config_.param_dtype, seg.numel);
      ops_.copy(value.get(), packed.get());
    }
  }
  // Every rank calls encode for the unit, with or without slices of its own:
  // the codec may reduce over the sharding group.
  const AccelGatherCodecArgs args = call.args(unit.layout.index, g.codec_flags, unit.group);
  const sdk::Services& s = ops_.services();
  s.check(codec_services_->encode(s.host(), &args), "gather_codec encode");
}

void GatherEngine::decode(UnitGather& g) {
  const UnitCodec& codec = *g.codec;
  const int64_t param_bytes = element_bytes(config_.param_dtype);
  CodecCall call;
  for (size_t r = 0; r < codec.plan.ranks.size(); ++r) {
    const int64_t base = static_cast<int64_t>(r) * codec.plan.packet_bytes;
    for (const CodecSegment& seg : codec.plan.ranks[r].segments) {
      const TypedView& full = call.views.emplace_back(*g.full, seg.begin * param_bytes, config_.param_dtype, seg.numel);
      if (seg.encoded) {
        const DLDataType code_dtype = codec.code_dtypes.at(static_cast<size_t>(seg.param));
        call.add(seg, full.get(),
                 call.views.emplace_back(g.packet_in.tensor(), base + seg.packet_offset, code_dtype, seg.numel).get());
      } else {
        const TypedView packed(g.packet_in.tensor(), base + seg.packet_offset, config_.param_dtype, seg.numel);
        ops_.copy(packed.get(), full.get());
      }
    }
  }
  const AccelGatherCodecArgs args = call.args(g.unit, g.codec_flags, store_.sharded(g.unit)->group);
  const sdk::Services& s = ops_.services();
  s.check(codec_services_->decode(s.host(), &args), "gather_codec decode");
}

int32_t GatherEngine::alive_count() const {
  const auto is_alive = [](State s) { return s != State::resharded; };
  return static_cast<int32_t>(std::count_if(state_.begin(), state_.end(), is_alive));
}

int64_t GatherEngine::elements(int32_t group) const {
  int64_t n = 0;
  for (int32_t u : plan_.groups[static_cast<size_t>(group)].units) n += store_.sharded(u)->layout.numel;
  return n;
}

int64_t GatherEngine::alive_elements() const {
  int64_t n = 0;
  for (size_t g = 0; g < state_.size(); ++g) {
    if (state_[g] != State::resharded) n += elements(static_cast<int32_t>(g));
  }
  return n;
}

void GatherEngine::note_alive() { counters_.max_alive = std::max(counters_.max_alive, alive_count()); }

void GatherEngine::issue(int32_t group, bool async, uint32_t codec_flags) {
  const DLDataType fp32{kDLFloat, 32, 1};
  std::vector<UnitGather>& gathers = in_flight_[static_cast<size_t>(group)];
  // Marked before anything is issued: should a unit fail half-way, release()
  // still completes the gathers already in flight before their buffers go.
  state_[static_cast<size_t>(group)] = State::gathering;
  for (int32_t u : plan_.groups[static_cast<size_t>(group)].units) {
    ShardedUnit& unit = *store_.sharded(u);
    UnitGather g;
    g.unit = u;
    g.full = ops_.materialize(u, ACCEL_STORAGE_PARAMS, ACCEL_INIT_UNDEFINED, config_.param_dtype).params;
    const int64_t shard_numel = unit.shards.shard_numel();

    // This rank's contribution: the master shard itself when it already is
    // fp32 on the device, else a device copy cast to param_dtype; a master in
    // the NVMe swap is read into host memory first.
    const DLTensor* send = unit.master_or_null();
    if (unit.master_swapped) {
      g.read_in = ops_.allocate(ACCEL_MEMORY_COMM, fp32, shard_numel, ACCEL_MEMORY_HOST_PINNED, false,
                                "sharding shard read from NVMe");
      store_.swap()->read_masters(u, static_cast<float*>(g.read_in.tensor().data));
      send = &g.read_in.tensor();
    }
    if (!sdk::same_space(*send, *g.full)) {
      sdk::BufferPool::Lease on_device =
          comm_buffers_.take(ACCEL_MEMORY_COMM, fp32, shard_numel, ACCEL_MEMORY_DEVICE, "sharding shard copied in");
      ops_.copy(send, &on_device.tensor());
      g.staged_shard = std::move(on_device);
      send = &g.staged_shard.tensor();
    }
    if (!accel_dtype_equal(send->dtype, config_.param_dtype)) {
      sdk::BufferPool::Lease cast = comm_buffers_.take(ACCEL_MEMORY_COMM, config_.param_dtype, shard_numel,
                                                       ACCEL_MEMORY_DEVICE, "sharding shard in param_dtype");
      ops_.convert(send, &cast.tensor());
      g.staged_shard = std::move(cast);  // frees the fp32 copy-in, if any, once cast
      send = &g.staged_shard.tensor();
    }

    g.codec_flags = codec_flags;
    g.codec = ask_codec(unit, codec_flags);
    if (g.codec != nullptr) {
      encode(g, unit, *send);
      g.staged_shard = sdk::BufferPool::Lease{};  // packed: the shard copy is no longer needed
      g.work = ops_.all_gather(unit.group, &g.packet_out.tensor(), &g.packet_in.tensor(), "sharding codec all_gather",
                               async);
      counters_.bytes += g.codec->plan.gathered_bytes();
      ++counters_.encoded_units;
      gathers.push_back(std::move(g));
      continue;
    }
    const DLTensor* receive = g.full;
    if (unit.shards.padding() != 0) {
      g.padded = comm_buffers_.take(ACCEL_MEMORY_COMM, config_.param_dtype, unit.shards.padded_numel(),
                                    ACCEL_MEMORY_DEVICE, "sharding padded all_gather");
      receive = &g.padded.tensor();
    }
    g.work = ops_.all_gather(unit.group, send, receive, "sharding all_gather", async);
    counters_.bytes += unit.shards.padded_numel() * element_bytes(config_.param_dtype);
    gathers.push_back(std::move(g));
  }
  state_[static_cast<size_t>(group)] = async ? State::gathering : State::gathered;
  ++counters_.gathers;
  note_alive();
  if (!async) complete(group);
}

void GatherEngine::complete(int32_t group) {
  std::vector<UnitGather>& gathers = in_flight_[static_cast<size_t>(group)];
  // Every handle is waited for, even after one failed, so no collective
  // still writes into a staging buffer when it is freed; the first failure
  // is rethrown afterwards.
  std::exception_ptr failure;
  for (UnitGather& g : gathers) {
    try {
      ops_.wait_and_free(g.work);
      g.work = nullptr;
      if (g.codec != nullptr && !failure) {
        decode(g);
      } else if (g.padded && !failure) {
        const int64_t numel = store_.sharded(g.unit)->layout.numel;
        const sdk::FlatView real(g.padded.tensor(), 0, numel);
        ops_.copy(real.get(), g.full);
      }
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  gathers.clear();  // frees the staging buffers
  state_[static_cast<size_t>(group)] = State::gathered;
  if (failure) std::rethrow_exception(failure);
}

void GatherEngine::ensure_gathered(int32_t group, uint32_t codec_flags) {
  if (deferred_ == group) deferred_ = -1;
  switch (state_[static_cast<size_t>(group)]) {
    case State::resharded:
      issue(group, false, codec_flags);
      break;
    case State::gathering:
      complete(group);
      break;
    case State::gathered:
      break;
  }
}

void GatherEngine::prefetch(int32_t group, uint32_t codec_flags) {
  if (group < 0 || state_[static_cast<size_t>(group)] != State::resharded) return;
  if (config_.max_prefetch_elements > 0 && elements(group) > config_.max_prefetch_elements) return;
  const bool over_count = config_.limit_all_gathers && alive_count() >= 2;
  const bool over_elements =
      config_.max_live_elements > 0 && alive_elements() + elements(group) > config_.max_live_elements;
  if (over_count || over_elements) {
    deferred_ = group;
    deferred_flags_ = codec_flags;
    return;
  }
  issue(group, true, codec_flags);
  ++counters_.prefetches;
}

void GatherEngine::release(int32_t group) {
  if (state_[static_cast<size_t>(group)] == State::resharded) return;
  if (state_[static_cast<size_t>(group)] == State::gathering) complete(group);
  for (int32_t u : plan_.groups[static_cast<size_t>(group)].units) ops_.release(u, ACCEL_STORAGE_PARAMS);
  state_[static_cast<size_t>(group)] = State::resharded;
  ++counters_.releases;
  if (deferred_ >= 0) {
    const int32_t next = deferred_;
    deferred_ = -1;
    prefetch(next, deferred_flags_);
  }
}

void GatherEngine::release_all() {
  deferred_ = -1;
  // Every group, even after one failed (teardown after an error); the first
  // failure is rethrown at the end.
  std::exception_ptr failure;
  for (size_t g = 0; g < state_.size(); ++g) {
    try {
      release(static_cast<int32_t>(g));
    } catch (...) {
      state_[g] = State::resharded;
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

GatherCounters GatherEngine::take_counters() {
  GatherCounters out = counters_;
  counters_ = GatherCounters{};
  counters_.max_alive = alive_count();
  return out;
}

}  // namespace accel::sharding
