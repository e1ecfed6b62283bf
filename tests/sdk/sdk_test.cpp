// Unit tests of the C++ plugin SDK (sdk/include/accel/sdk/), driven through
// the C ABI exactly as a host drives a plugin, against a fake services table
// built here (FakeHost) that records errors, log lines and metrics.
// Pins: the exception barrier (a throwing hook returns a status and reports
// its message, nothing unwinds into the caller), the descriptor and option
// schema generated from static metadata, NULL hooks for methods a class does
// not override, typed option lookup, logging, tensors and Buffer.
#include <accel/sdk/buffer_pool.hpp>
#include <accel/sdk/checked_math.hpp>
#include <accel/sdk/precision.hpp>
#include <accel/sdk/sdk.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using accel::sdk::Error;
using accel::sdk::Services;

// ----------------------------------------------------------------- FakeHost

// A host as a plugin sees it: the AccelHost* handle is the FakeHost itself.
struct FakeHost {
  std::vector<std::pair<AccelStatus, std::string>> errors;
  std::vector<std::pair<AccelLogLevel, std::string>> logs;
  std::map<std::string, std::pair<double, AccelMetricReduce>> metrics;
  AccelLogLevel min_level = ACCEL_LOG_INFO;
  std::string last_error;
  AccelIdentity identity{};

  std::map<std::string, bool> bools;
  std::map<std::string, int64_t> ints;
  std::map<std::string, double> doubles;
  std::map<std::string, const char*> strings;  // nullptr: unset, no default
  std::map<std::string, int32_t> enums;
  std::map<std::string, bool> given;

  int allocations = 0;
  int deallocations = 0;
  int copies = 0;
  int synchronizations = 0;

  AccelOptionServices options{};
  AccelTraceServices trace{};
  AccelMemoryServices memory{};
  AccelHostServices services{};

  FakeHost() {
    identity.struct_size = sizeof(identity);
    identity.rank = 3;
    identity.world_size = 8;
    options.struct_size = sizeof(options);
    options.get_bool = &lookup<bool, &FakeHost::bools>;
    options.get_int = &lookup<int64_t, &FakeHost::ints>;
    options.get_double = &lookup<double, &FakeHost::doubles>;
    options.get_string = &lookup<const char*, &FakeHost::strings>;
    options.get_enum = &lookup<int32_t, &FakeHost::enums>;
    options.is_set = &lookup<bool, &FakeHost::given>;
    trace.struct_size = sizeof(trace);
    trace.metric = [](AccelHost* h, const char* name, double value,
                      AccelMetricReduce reduce) {
      self(h)->metrics[name] = {value, reduce};
    };
    memory.struct_size = sizeof(memory);
    memory.allocate = &allocate;
    memory.deallocate = &deallocate;
    memory.copy = &copy;
    memory.stream_synchronize = [](AccelHost* h, AccelStream) {
      ++self(h)->synchronizations;
      return ACCEL_OK;
    };
    services.struct_size = sizeof(services);
    services.set_error = [](AccelHost* h, AccelStatus status,
                            const char* message) {
      self(h)->errors.emplace_back(status, message ? message : "");
    };
    services.last_error = [](AccelHost* h) {
      return self(h)->last_error.c_str();
    };
    services.log = [](AccelHost* h, AccelLogLevel level, const char* m) {
      self(h)->logs.emplace_back(level, m);
    };
    services.log_enabled = [](AccelHost* h, AccelLogLevel level) {
      return level >= self(h)->min_level;
    };
    services.get_identity = [](AccelHost* h, const AccelIdentity** id) {
      *id = &self(h)->identity;
      return ACCEL_OK;
    };
    services.options = &options;
    services.trace = &trace;
    services.memory = &memory;
  }
  FakeHost(const FakeHost&) = delete;
  FakeHost& operator=(const FakeHost&) = delete;

  AccelHost* handle() { return reinterpret_cast<AccelHost*>(this); }
  Services sdk() { return Services(handle(), &services); }
  static FakeHost* self(AccelHost* h) { return reinterpret_cast<FakeHost*>(h); }

  // Every typed lookup: NOT_FOUND when no map has the name, INVALID_ARGUMENT
  // when another type's map has it, as the ABI specifies.
  template <typename V, std::map<std::string, V> FakeHost::*Values>
  static AccelStatus lookup(AccelHost* h, const char* name, V* value) {
    FakeHost* fake = self(h);
    const auto it = (fake->*Values).find(name);
    if (it != (fake->*Values).end()) {
      *value = it->second;
      return ACCEL_OK;
    }
    const bool known = fake->bools.count(name) || fake->ints.count(name) ||
                       fake->doubles.count(name) ||
                       fake->strings.count(name) || fake->enums.count(name);
    fake->last_error = std::string(known ? "wrong type for " : "no option ") +
                       name;
    return known ? ACCEL_ERROR_INVALID_ARGUMENT : ACCEL_ERROR_NOT_FOUND;
  }

  struct FakeBuffer {
    std::vector<int64_t> shape, strides;
    DLTensor tensor{};
  };
  static AccelStatus allocate(AccelHost* h, AccelAllocateArgs* args) {
    auto* buffer = new FakeBuffer;
    buffer->shape.assign(args->shape, args->shape + args->ndim);
    buffer->strides.assign(static_cast<size_t>(args->ndim), 1);
    buffer->tensor.ndim = args->ndim;
    buffer->tensor.shape = buffer->shape.data();
    buffer->tensor.strides = buffer->strides.data();
    buffer->tensor.dtype = args->dtype;
    buffer->tensor.device.device_type = kDLCPU;
    buffer->tensor.data = std::calloc(
        static_cast<size_t>(accel_tensor_nbytes(&buffer->tensor)) + 1, 1);
    args->buffer = reinterpret_cast<AccelBuffer*>(buffer);
    args->tensor = &buffer->tensor;
    ++self(h)->allocations;
    return ACCEL_OK;
  }
  static AccelStatus deallocate(AccelHost* h, AccelBuffer* b, AccelStream) {
    auto* buffer = reinterpret_cast<FakeBuffer*>(b);
    if (buffer == nullptr) return ACCEL_OK;
    std::free(buffer->tensor.data);
    delete buffer;
    ++self(h)->deallocations;
    return ACCEL_OK;
  }
  // "Device" memory in this fake is ordinary memory: copy the bytes.
  static AccelStatus copy(AccelHost* h, const AccelCopyArgs* args) {
    std::memcpy(accel_tensor_begin(args->dst), accel_tensor_begin(args->src),
                static_cast<size_t>(accel_tensor_nbytes(args->src)));
    ++self(h)->copies;
    return ACCEL_OK;
  }
};

AccelHostInfo host_info(FakeHost& fake) {
  AccelHostInfo info{};
  info.struct_size = sizeof(info);
  info.abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR};
  info.host_name = "fake-host";
  info.host = fake.handle();
  info.services = &fake.services;
  return info;
}

// Runs the create hook of `descriptor` against `fake`.
AccelPlugin* create(const AccelPluginDescriptor* descriptor, FakeHost& fake,
                    AccelStatus expected = ACCEL_OK) {
  AccelCreateArgs args{};
  args.struct_size = sizeof(args);
  args.host = fake.handle();
  args.services = &fake.services;
  EXPECT_EQ(descriptor->hooks->create(&args), expected);
  return args.self;
}

// ----------------------------------------------------------- test plugins

// An observer: options, conflicts, one hook.
class Observer final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{
      "observer", "1.2.3", "watches steps", ACCEL_PLUGIN_OBSERVER,
      ACCEL_CAP_CPU | ACCEL_CAP_CUDA, "fsdp, ddp"};
  static constexpr accel::sdk::Option options[] = {
      {"threshold", ACCEL_OPTION_DOUBLE, "3.0", "spike threshold", nullptr,
       "0", "100"},
      {"mode", ACCEL_OPTION_ENUM, "fast", "how to watch", "fast|slow | exact"},
      {"label", ACCEL_OPTION_STRING, nullptr, "a required label", nullptr,
       nullptr, nullptr, ACCEL_OPTION_FLAG_REQUIRED},
  };

  explicit Observer(const Services& s)
      : Plugin(s), threshold(s.option<double>("threshold")) {
    ++live;
  }
  ~Observer() override { --live; }
  void step_end(const AccelStepArgs& args) override { last_step = args.step; }

  static inline int live = 0;
  double threshold;
  int64_t last_step = -1;
};

// Throws from every hook it overrides, in every way a hook can fail.
class Thrower final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{
      "thrower", "0.1.0", "fails", ACCEL_PLUGIN_PARALLEL, ACCEL_CAP_CPU};
  using Plugin::Plugin;
  ~Thrower() override { ++destroyed; }

  void setup(const AccelSetupArgs&) override {
    throw std::runtime_error("boom");
  }
  void step_begin(const AccelStepArgs& args) override {
    throw Error(ACCEL_ERROR_INVALID_ARGUMENT,
                accel::sdk::format("bad step %lld",
                                   static_cast<long long>(args.step)));
  }
  void step_end(const AccelStepArgs&) override { throw 42; }
  void unit_forward_pre(AccelUnitHookArgs&) override { throw std::bad_alloc(); }
  void gradients_ready(const AccelGradientsReadyArgs&) override {
    services().check(ACCEL_ERROR_TIMEOUT);  // the service's message pends
  }
  void gradients_finalize(const AccelStepArgs&) override {
    services().check(ACCEL_ERROR_TIMEOUT, "bucket 3");
  }
  void linear_forward(AccelLinearForwardArgs& args,
                      const AccelLinearNext& next) override {
    accel::sdk::forward_next(next, args);
  }
  void trace_event(const AccelTraceEvent&) override {
    throw std::runtime_error("in trace_event");
  }
  void teardown() override { throw std::logic_error("teardown failed"); }

  static inline int destroyed = 0;
};

// A parallel plugin overriding every hook.
class EveryHook final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{
      "every_hook", "1.0.0", "all of them", ACCEL_PLUGIN_PARALLEL,
      ACCEL_CAP_CPU | ACCEL_CAP_SHARDS_GRADS | ACCEL_CAP_SHARDS_OPTIMIZER};
  using Plugin::Plugin;
  void plan_model(const AccelPlanArgs&) override {}
  void setup(const AccelSetupArgs&) override {}
  void step_begin(const AccelStepArgs&) override {}
  void step_end(const AccelStepArgs&) override {}
  void unit_forward_pre(AccelUnitHookArgs&) override {}
  void unit_forward_post(AccelUnitHookArgs&) override {}
  void unit_backward_pre(AccelUnitHookArgs&) override {}
  void unit_backward_post(AccelUnitHookArgs&) override {}
  void gradients_ready(const AccelGradientsReadyArgs&) override {}
  void gradients_finalize(const AccelStepArgs&) override {}
  void clip_gradients(const AccelClipArgs&) override {}
  void optimizer_step(const AccelOptimizerStepArgs&) override {}
  void train_step(const AccelTrainStepArgs&) override {}
  void linear_forward(AccelLinearForwardArgs&, const AccelLinearNext&) override {}
  void linear_backward(AccelLinearBackwardArgs&,
                       const AccelLinearNext&) override {}
  void save_state(const AccelStateArgs&) override {}
  void load_state(const AccelStateArgs&) override {}
  void trace_event(const AccelTraceEvent&) override {}
};

// Its constructor reads an option the host does not have.
class FailsInCreate final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{
      "fails_in_create", "1.0.0", "", ACCEL_PLUGIN_OBSERVER, ACCEL_CAP_CPU};
  explicit FailsInCreate(const Services& s) : Plugin(s) {
    (void)s.option<int>("missing");
  }
};

}  // namespace

// The macro itself, once per binary, as a plugin uses it.
ACCEL_PLUGIN(Observer)

namespace {

// -------------------------------------------------------------- descriptor

TEST(SdkDescriptor, EntrySymbolReturnsTheDescriptorFromStaticMetadata) {
  FakeHost fake;
  const AccelHostInfo info = host_info(fake);
  const AccelPluginDescriptor* d = nullptr;
  ASSERT_EQ(accel_plugin_init_v1(&info, &d), ACCEL_OK);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->struct_size, sizeof(AccelPluginDescriptor));
  EXPECT_EQ(d->abi_version.major, static_cast<uint32_t>(ACCEL_ABI_VERSION_MAJOR));
  EXPECT_EQ(d->abi_version.minor, static_cast<uint32_t>(ACCEL_ABI_VERSION_MINOR));
  EXPECT_STREQ(d->name, "observer");
  EXPECT_STREQ(d->version, "1.2.3");
  EXPECT_STREQ(d->description, "watches steps");
  EXPECT_EQ(d->kind, ACCEL_PLUGIN_OBSERVER);
  EXPECT_EQ(d->capabilities, ACCEL_CAP_CPU | ACCEL_CAP_CUDA);
  ASSERT_EQ(d->num_conflicts, 2u);
  EXPECT_STREQ(d->conflicts[0], "fsdp");
  EXPECT_STREQ(d->conflicts[1], "ddp");
  ASSERT_NE(d->hooks, nullptr);
  EXPECT_EQ(d->hooks->struct_size, sizeof(AccelHooks));
  EXPECT_TRUE(fake.errors.empty());

  const AccelPluginDescriptor* again = nullptr;
  ASSERT_EQ(accel_plugin_init_v1(&info, &again), ACCEL_OK);
  EXPECT_EQ(again, d) << "built once, the same static data every time";
  EXPECT_EQ(accel_plugin_init_v1(&info, nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
}

TEST(SdkDescriptor, OptionSchemaIsGeneratedFromTheOptionArray) {
  const AccelPluginDescriptor* d = accel::sdk::descriptor_for<Observer>();
  ASSERT_EQ(d->num_options, 3u);
  for (size_t i = 0; i < d->num_options; ++i) {
    EXPECT_EQ(d->options[i]->struct_size, sizeof(AccelOptionSpec));
    EXPECT_EQ(d->options[i]->extensions, nullptr);
  }
  const AccelOptionSpec& threshold = *d->options[0];
  EXPECT_STREQ(threshold.name, "threshold");
  EXPECT_EQ(threshold.type, ACCEL_OPTION_DOUBLE);
  EXPECT_STREQ(threshold.default_value, "3.0");
  EXPECT_STREQ(threshold.help, "spike threshold");
  EXPECT_STREQ(threshold.min_value, "0");
  EXPECT_STREQ(threshold.max_value, "100");
  EXPECT_EQ(threshold.allowed_values, nullptr);
  EXPECT_EQ(threshold.num_allowed_values, 0u);
  EXPECT_EQ(threshold.flags, 0u);

  const AccelOptionSpec& mode = *d->options[1];
  EXPECT_EQ(mode.type, ACCEL_OPTION_ENUM);
  ASSERT_EQ(mode.num_allowed_values, 3u);
  EXPECT_STREQ(mode.allowed_values[0], "fast");
  EXPECT_STREQ(mode.allowed_values[1], "slow");
  EXPECT_STREQ(mode.allowed_values[2], "exact") << "spaces are trimmed";
  EXPECT_EQ(mode.min_value, nullptr);

  const AccelOptionSpec& label = *d->options[2];
  EXPECT_EQ(label.default_value, nullptr);
  EXPECT_EQ(label.flags, ACCEL_OPTION_FLAG_REQUIRED);
}

TEST(SdkDescriptor, NoOptionsNoConflictsMeansNullArrays) {
  const AccelPluginDescriptor* d = accel::sdk::descriptor_for<Thrower>();
  EXPECT_EQ(d->num_options, 0u);
  EXPECT_EQ(d->options, nullptr);
  EXPECT_EQ(d->num_conflicts, 0u);
  EXPECT_EQ(d->conflicts, nullptr);
}

// ------------------------------------------------------------------- hooks

TEST(SdkHooks, OnlyOverriddenHooksAreInTheTable) {
  const AccelHooks& h = *accel::sdk::descriptor_for<Observer>()->hooks;
  EXPECT_NE(h.create, nullptr);    // the SDK makes the instance
  EXPECT_NE(h.teardown, nullptr);  // and deletes it
  EXPECT_NE(h.step_end, nullptr);
  EXPECT_EQ(h.plan_model, nullptr);
  EXPECT_EQ(h.setup, nullptr);
  EXPECT_EQ(h.step_begin, nullptr);
  EXPECT_EQ(h.unit_forward_pre, nullptr);
  EXPECT_EQ(h.unit_forward_post, nullptr);
  EXPECT_EQ(h.unit_backward_pre, nullptr);
  EXPECT_EQ(h.unit_backward_post, nullptr);
  EXPECT_EQ(h.gradients_ready, nullptr);
  EXPECT_EQ(h.gradients_finalize, nullptr);
  EXPECT_EQ(h.clip_gradients, nullptr);
  EXPECT_EQ(h.optimizer_step, nullptr);
  EXPECT_EQ(h.train_step, nullptr);
  EXPECT_EQ(h.linear_forward, nullptr);
  EXPECT_EQ(h.linear_backward, nullptr);
  EXPECT_EQ(h.save_state, nullptr);
  EXPECT_EQ(h.load_state, nullptr);
  EXPECT_EQ(h.trace_event, nullptr);
}

TEST(SdkHooks, EveryOverriddenHookIsInTheTable) {
  const AccelHooks& h = *accel::sdk::descriptor_for<EveryHook>()->hooks;
  const void* const hooks[] = {
      reinterpret_cast<const void*>(h.create),
      reinterpret_cast<const void*>(h.plan_model),
      reinterpret_cast<const void*>(h.setup),
      reinterpret_cast<const void*>(h.step_begin),
      reinterpret_cast<const void*>(h.step_end),
      reinterpret_cast<const void*>(h.unit_forward_pre),
      reinterpret_cast<const void*>(h.unit_forward_post),
      reinterpret_cast<const void*>(h.unit_backward_pre),
      reinterpret_cast<const void*>(h.unit_backward_post),
      reinterpret_cast<const void*>(h.gradients_ready),
      reinterpret_cast<const void*>(h.gradients_finalize),
      reinterpret_cast<const void*>(h.clip_gradients),
      reinterpret_cast<const void*>(h.optimizer_step),
      reinterpret_cast<const void*>(h.train_step),
      reinterpret_cast<const void*>(h.linear_forward),
      reinterpret_cast<const void*>(h.linear_backward),
      reinterpret_cast<const void*>(h.save_state),
      reinterpret_cast<const void*>(h.load_state),
      reinterpret_cast<const void*>(h.teardown),
      reinterpret_cast<const void*>(h.trace_event)};
  for (size_t i = 0; i < std::size(hooks); ++i) {
    EXPECT_NE(hooks[i], nullptr) << "hook #" << i;
  }
}

TEST(SdkHooks, CreateConstructsFromServicesAndTeardownDeletes) {
  FakeHost fake;
  fake.doubles["threshold"] = 2.5;
  const AccelPluginDescriptor* d = accel::sdk::descriptor_for<Observer>();
  AccelPlugin* self = create(d, fake);
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(Observer::live, 1);
  auto* observer = reinterpret_cast<Observer*>(
      reinterpret_cast<accel::sdk::Plugin*>(self));
  EXPECT_DOUBLE_EQ(observer->threshold, 2.5);

  AccelStepArgs step{};
  step.struct_size = sizeof(step);
  step.step = 41;
  EXPECT_EQ(d->hooks->step_end(self, &step), ACCEL_OK);
  EXPECT_EQ(observer->last_step, 41);

  EXPECT_EQ(d->hooks->teardown(self), ACCEL_OK);
  EXPECT_EQ(Observer::live, 0);
  EXPECT_TRUE(fake.errors.empty());
}

// A take-over an option switches off: declined in the constructor.
class Declining final : public accel::sdk::Plugin {
 public:
  static constexpr accel::sdk::PluginInfo info{"declining", "1.0.0", "declines its train_step",
                                               ACCEL_PLUGIN_PARALLEL, ACCEL_CAP_CPU, nullptr};
  explicit Declining(const Services& s) : Plugin(s) { decline(&AccelHooks::train_step); }
  void train_step(const AccelTrainStepArgs&) override {}
  void step_end(const AccelStepArgs&) override {}
};

TEST(SdkHooks, ADeclinedHookLeavesTheRunsTableOnly) {
  FakeHost fake;
  const AccelPluginDescriptor* d = accel::sdk::descriptor_for<Declining>();
  EXPECT_NE(d->hooks->train_step, nullptr);  // the descriptor offers it
  AccelCreateArgs args{};
  args.struct_size = sizeof(args);
  args.host = fake.handle();
  args.services = &fake.services;
  ASSERT_EQ(d->hooks->create(&args), ACCEL_OK);
  ASSERT_NE(args.hooks, nullptr);  // this run's narrower table
  EXPECT_EQ(args.hooks->train_step, nullptr);
  EXPECT_NE(args.hooks->step_end, nullptr);
  EXPECT_EQ(args.hooks->teardown, d->hooks->teardown);
  EXPECT_EQ(d->hooks->teardown(args.self), ACCEL_OK);
}

// -------------------------------------------------------- exception barrier

TEST(SdkCreate, ConstructorFailureFailsCreateWithTheOptionNamed) {
  FakeHost fake;
  const AccelPluginDescriptor* d = accel::sdk::descriptor_for<FailsInCreate>();
  EXPECT_EQ(create(d, fake, ACCEL_ERROR_NOT_FOUND), nullptr);
  ASSERT_EQ(fake.errors.size(), 1u);
  EXPECT_EQ(fake.errors[0].first, ACCEL_ERROR_NOT_FOUND);
  EXPECT_EQ(fake.errors[0].second, "option 'missing'");
}

class SdkBarrier : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = accel::sdk::descriptor_for<Thrower>();
    self_ = create(d_, fake_);
    ASSERT_NE(self_, nullptr);
  }
  void TearDown() override {
    if (self_ != nullptr) d_->hooks->teardown(self_);
  }
  // The one error reported since the last call, or {OK, "<none>"}.
  std::pair<AccelStatus, std::string> reported() {
    std::pair<AccelStatus, std::string> last{ACCEL_OK, "<none>"};
    EXPECT_LE(fake_.errors.size(), 1u);
    if (!fake_.errors.empty()) last = fake_.errors.back();
    fake_.errors.clear();
    return last;
  }

  FakeHost fake_;
  const AccelPluginDescriptor* d_ = nullptr;
  AccelPlugin* self_ = nullptr;
};

TEST_F(SdkBarrier, StdExceptionBecomesInternalWithItsMessage) {
  AccelSetupArgs args{};
  EXPECT_EQ(d_->hooks->setup(self_, &args), ACCEL_ERROR_INTERNAL);
  EXPECT_EQ(reported(), std::make_pair(ACCEL_ERROR_INTERNAL,
                                       std::string("uncaught exception: boom")));
}

TEST_F(SdkBarrier, SdkErrorKeepsItsStatusAndMessage) {
  AccelStepArgs args{};
  args.step = 7;
  EXPECT_EQ(d_->hooks->step_begin(self_, &args), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(reported(), std::make_pair(ACCEL_ERROR_INVALID_ARGUMENT,
                                       std::string("bad step 7")));
}

TEST_F(SdkBarrier, NonStandardExceptionIsContained) {
  AccelStepArgs args{};
  EXPECT_EQ(d_->hooks->step_end(self_, &args), ACCEL_ERROR_INTERNAL);
  const auto [status, message] = reported();
  EXPECT_EQ(status, ACCEL_ERROR_INTERNAL);
  EXPECT_NE(message.find("not derived from std::exception"), std::string::npos);
}

TEST_F(SdkBarrier, BadAllocBecomesOutOfMemory) {
  AccelUnitHookArgs args{};
  EXPECT_EQ(d_->hooks->unit_forward_pre(self_, &args),
            ACCEL_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(reported().first, ACCEL_ERROR_OUT_OF_MEMORY);
}

TEST_F(SdkBarrier, PropagatedServiceFailureLeavesThePendingMessageAlone) {
  AccelGradientsReadyArgs ready{};
  EXPECT_EQ(d_->hooks->gradients_ready(self_, &ready), ACCEL_ERROR_TIMEOUT);
  EXPECT_EQ(reported().second, "<none>") << "no set_error: the host has it";

  AccelStepArgs step{};
  EXPECT_EQ(d_->hooks->gradients_finalize(self_, &step), ACCEL_ERROR_TIMEOUT);
  EXPECT_EQ(reported(), std::make_pair(ACCEL_ERROR_TIMEOUT,
                                       std::string("bucket 3")));
}

TEST_F(SdkBarrier, NextLinkFailurePropagatesThroughTheChain) {
  AccelLinearNext next{};
  next.struct_size = sizeof(next);
  next.forward = [](const AccelLinearNext*, AccelLinearForwardArgs*) {
    return ACCEL_ERROR_ABORTED;
  };
  AccelLinearForwardArgs args{};
  EXPECT_EQ(d_->hooks->linear_forward(self_, &args, &next), ACCEL_ERROR_ABORTED);
  EXPECT_EQ(reported().second, "<none>");

  next.forward = [](const AccelLinearNext*, AccelLinearForwardArgs*) {
    return ACCEL_OK;
  };
  EXPECT_EQ(d_->hooks->linear_forward(self_, &args, &next), ACCEL_OK);
}

TEST_F(SdkBarrier, TraceEventCannotFailSoTheExceptionBecomesALogLine) {
  AccelTraceEvent event{};
  d_->hooks->trace_event(self_, &event);
  EXPECT_TRUE(fake_.errors.empty());
  ASSERT_EQ(fake_.logs.size(), 1u);
  EXPECT_EQ(fake_.logs[0].first, ACCEL_LOG_ERROR);
  EXPECT_EQ(fake_.logs[0].second,
            "trace_event: uncaught exception: in trace_event");
}

TEST_F(SdkBarrier, ThrowingTeardownStillDeletesTheInstance) {
  const int destroyed = Thrower::destroyed;
  EXPECT_EQ(d_->hooks->teardown(self_), ACCEL_ERROR_INTERNAL);
  self_ = nullptr;
  EXPECT_EQ(Thrower::destroyed, destroyed + 1);
  EXPECT_EQ(reported().second, "uncaught exception: teardown failed");
}

TEST(SdkBarrierEntry, WorksWithoutAServicesTable) {
  EXPECT_EQ(accel::sdk::guard(nullptr, nullptr,
                              [] { throw std::runtime_error("x"); }),
            ACCEL_ERROR_INTERNAL);
  EXPECT_EQ(accel::sdk::guard(nullptr, nullptr, [] {}), ACCEL_OK);
  EXPECT_EQ(Error(ACCEL_OK, "nonsense").status(), ACCEL_ERROR_INTERNAL);
}

// ----------------------------------------------------------------- services

TEST(SdkServices, TypedOptionLookup) {
  FakeHost fake;
  fake.bools["on"] = true;
  fake.ints["steps"] = 12;
  fake.ints["huge"] = int64_t{1} << 40;
  fake.doubles["lr"] = 0.5;
  fake.strings["path"] = "/tmp/x";
  fake.strings["unset"] = nullptr;
  fake.enums["mode"] = 2;
  fake.given["steps"] = true;
  const Services s = fake.sdk();

  EXPECT_TRUE(s.option<bool>("on"));
  EXPECT_EQ(s.option<int64_t>("steps"), 12);
  EXPECT_EQ(s.option<int>("steps"), 12);
  EXPECT_EQ(s.option<uint8_t>("steps"), 12u);
  EXPECT_EQ(s.option<int64_t>("huge"), int64_t{1} << 40);
  EXPECT_DOUBLE_EQ(s.option<double>("lr"), 0.5);
  EXPECT_FLOAT_EQ(s.option<float>("lr"), 0.5f);
  EXPECT_EQ(s.option<std::string>("path"), "/tmp/x");
  EXPECT_EQ(s.option<std::string>("unset"), "");
  EXPECT_EQ(s.option<const char*>("unset"), nullptr);
  EXPECT_EQ(s.option_index("mode"), 2);
  EXPECT_TRUE(s.option_is_set("steps"));

  try {
    (void)s.option<int32_t>("huge");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(e.what(), "option 'huge': 1099511627776 is out of range");
  }
  try {
    (void)s.option<double>("path");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(e.what(), "option 'path'");
    EXPECT_EQ(s.last_error(), "wrong type for path");
  }
  try {
    (void)s.option<bool>("nope");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_NOT_FOUND);
  }

  // A host of an older minor whose option table ends before get_enum.
  fake.options.struct_size = offsetof(AccelOptionServices, get_enum);
  try {
    (void)s.option_index("mode");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_UNSUPPORTED);
  }
  EXPECT_TRUE(accel::sdk::has_fn(&fake.options, &AccelOptionServices::get_string));
  EXPECT_FALSE(accel::sdk::has_fn(&fake.options, &AccelOptionServices::is_set));

  fake.services.options = nullptr;  // a host without the option area
  try {
    (void)s.option<bool>("on");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_UNSUPPORTED);
  }
}

// Counts how often it is formatted.
struct Expensive {
  int* formatted;
};
std::ostream& operator<<(std::ostream& out, const Expensive& e) {
  ++*e.formatted;
  return out << "expensive";
}

TEST(SdkServices, LoggingPrintfAndStreamsSkipDisabledLevels) {
  FakeHost fake;
  const Services s = fake.sdk();
  s.logf(ACCEL_LOG_WARN, "loss %.2f at step %d", 1.5, 4);
  s.warn() << "x = " << 3 << ", y = " << 0.25;
  int formatted = 0;
  s.debug() << Expensive{&formatted};  // below min_level (INFO)
  s.logf(ACCEL_LOG_DEBUG, "%s", "dropped");
  s.log(ACCEL_LOG_INFO, std::string("plain"));
  ASSERT_EQ(fake.logs.size(), 3u);
  EXPECT_EQ(fake.logs[0], std::make_pair(ACCEL_LOG_WARN,
                                         std::string("loss 1.50 at step 4")));
  EXPECT_EQ(fake.logs[1].second, "x = 3, y = 0.25");
  EXPECT_EQ(fake.logs[2].second, "plain");
  EXPECT_EQ(formatted, 0);
}

TEST(SdkServices, IdentityMetricsAndMissingAreas) {
  FakeHost fake;
  const Services s = fake.sdk();
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.world_size(), 8);
  s.metric("spikes", 2.0);
  s.metric("peak", 5.0, ACCEL_METRIC_MAX);
  EXPECT_EQ(fake.metrics["spikes"], std::make_pair(2.0, ACCEL_METRIC_LAST));
  EXPECT_EQ(fake.metrics["peak"], std::make_pair(5.0, ACCEL_METRIC_MAX));
  fake.services.trace = nullptr;
  s.metric("ignored", 1.0);  // no trace area: a no-op
  { accel::sdk::TraceRange range(s, "range", "test"); }
  EXPECT_EQ(fake.metrics.count("ignored"), 0u);
  EXPECT_EQ(accel::sdk::format("%s-%05d", "long", 42), "long-00042");
  EXPECT_EQ(accel::sdk::format("%s", std::string(5000, 'a').c_str()).size(),
            5000u);
}

// The precision policy (ABI 1.8) on a host without it: a 1.7 table ends
// before `precision`, so the policy reads as the default and setting one is
// refused with the reason, never written past the table.
TEST(SdkServices, PrecisionPolicyOnAHostBefore18IsTheDefault) {
  FakeHost fake;
  fake.services.struct_size = offsetof(AccelHostServices, precision);  // a 1.7 host's table
  const Services s = fake.sdk();
  const AccelPrecisionPolicy policy = s.precision_policy();
  EXPECT_EQ(policy.struct_size, sizeof(AccelPrecisionPolicy));
  EXPECT_FALSE(accel::sdk::wants_fp8_grad_comm(policy));
  EXPECT_FALSE(accel::sdk::wants_scaled_moments(policy));
  try {
    s.set_precision_policy(policy);
    FAIL() << "set_precision_policy on a 1.7 host must throw";
  } catch (const accel::sdk::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("1.8"), std::string::npos) << e.what();
  }
}

// The policy's scales (accel/precision.h): powers of two; N summands of the
// largest magnitude cannot overflow the format even when every combine
// rounds up; MS-AMP's moment scale puts the amax in (fmt_max / 2, fmt_max].
TEST(SdkPrecision, ScalesArePowersOfTwoWithHeadroomForTheSum) {
  const DLDataType e4m3{ACCEL_DL_FLOAT8_E4M3FN, 8, 1};
  for (float amax : {1e-6f, 0.37f, 1.0f, 3.0f, 448.0f, 1e4f}) {
    for (int n : {1, 2, 3, 4, 8}) {
      const float s = accel::sdk::fp8_comm_scale(amax, n, e4m3);
      int exponent = 0;
      EXPECT_EQ(std::frexp(s, &exponent), 0.5f) << amax << " " << n;
      double bound = n;
      for (int i = 2; i < n; ++i) bound *= 1.0625;
      EXPECT_LE(amax * s * bound, 448.0) << amax << " " << n;
      EXPECT_GT(amax * s * bound * 2, 448.0) << amax << " " << n;  // the largest such power
    }
    const float m = accel::sdk::moment_scale(amax, 448.0);
    EXPECT_LE(amax * m, 448.0f);
    EXPECT_GT(amax * m, 224.0f);
  }
  EXPECT_EQ(accel::sdk::fp8_comm_scale(0.0f, 2, e4m3), 1.0f);
  EXPECT_EQ(accel::sdk::fp8_comm_scale(INFINITY, 2, e4m3), 1.0f);
  EXPECT_EQ(accel::sdk::moment_scale(0.0f, 65504.0), 1.0f);
}

// ------------------------------------------------------------------ tensors

TEST(SdkTensor, DtypesViewsAndScalars) {
  FakeHost fake;
  const Services s = fake.sdk();
  EXPECT_TRUE(accel_dtype_equal(accel::sdk::dtype_of<float>(),
                                accel_dtype(kDLFloat, 32)));
  EXPECT_TRUE(accel_dtype_equal(accel::sdk::dtype_of<int64_t>(),
                                accel_dtype(kDLInt, 64)));
  EXPECT_TRUE(accel_dtype_equal(accel::sdk::dtype_of<uint8_t>(),
                                accel_dtype(kDLUInt, 8)));
  EXPECT_TRUE(accel_dtype_equal(accel::sdk::dtype_of<bool>(),
                                accel_dtype(ACCEL_DL_BOOL, 8)));

  float storage[3] = {0.0f, 0.0f, 2.75f};
  DLTensor loss{};
  loss.data = storage;
  loss.byte_offset = 2 * sizeof(float);  // honoured
  loss.device.device_type = kDLCPU;
  loss.dtype = accel_dtype(kDLFloat, 32);
  EXPECT_FLOAT_EQ(accel::sdk::read_scalar<float>(s, loss), 2.75f);
  EXPECT_EQ(fake.copies, 0) << "host memory is read directly";
  EXPECT_EQ(accel::sdk::describe(loss), "float32[] on cpu");

  loss.device.device_type = kDLCUDA;  // copied to the host, then synced
  EXPECT_FLOAT_EQ(accel::sdk::read_scalar<float>(s, loss), 2.75f);
  EXPECT_EQ(fake.copies, 1);
  EXPECT_EQ(fake.synchronizations, 1);
  EXPECT_THROW(accel::sdk::data<float>(loss), Error);  // not host memory

  loss.device.device_type = kDLCPU;
  try {
    (void)accel::sdk::read_scalar<double>(s, loss);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(e.what(),
                 "expected a one-element float64 tensor, got float32[] on cpu");
  }
}

TEST(SdkTensor, BufferFreesWhatItOwnsAndReleaseHandsItOn) {
  FakeHost fake;
  const Services s = fake.sdk();
  {
    accel::sdk::Buffer buffer(s, ACCEL_MEMORY_WORKSPACE,
                              accel_dtype(kDLFloat, 32), {4, 8});
    ASSERT_TRUE(buffer);
    EXPECT_EQ(accel::sdk::describe(buffer.tensor()), "float32[4, 8] on cpu");
    accel::sdk::data<float>(buffer.tensor())[31] = 1.0f;
    accel::sdk::Buffer moved = std::move(buffer);
    EXPECT_FALSE(buffer);  // NOLINT(bugprone-use-after-move): pinned on purpose
    EXPECT_TRUE(moved);
  }
  EXPECT_EQ(fake.allocations, 1);
  EXPECT_EQ(fake.deallocations, 1);

  accel::sdk::Buffer handed(s, ACCEL_MEMORY_ACTIVATIONS,
                            accel_dtype(kDLFloat, 32), {2});
  AccelBuffer* raw = handed.release();
  EXPECT_FALSE(handed);
  EXPECT_EQ(fake.deallocations, 1) << "released: the new owner frees it";
  FakeHost::deallocate(fake.handle(), raw, nullptr);
}

// Sharding plugins' staging buffers: a returned buffer serves the next lease
// of its shape; at most keep_per_shape idle buffers of a shape are kept.
TEST(SdkBufferPool, ReusesBuffersOfAShapeAndKeepsNoMoreThanThePlan) {
  FakeHost fake;
  const Services s = fake.sdk();
  const DLDataType f32 = accel_dtype(kDLFloat, 32);
  {
    accel::sdk::BufferPool pool(s, /*keep_per_shape=*/2);
    const void* first = nullptr;
    {
      accel::sdk::BufferPool::Lease a = pool.take(ACCEL_MEMORY_COMM, f32, 16, ACCEL_MEMORY_DEVICE, "a");
      first = a.tensor().data;
    }
    accel::sdk::BufferPool::Lease again = pool.take(ACCEL_MEMORY_COMM, f32, 16, ACCEL_MEMORY_DEVICE, "a");
    EXPECT_EQ(again.tensor().data, first);
    EXPECT_EQ(fake.allocations, 1);
    accel::sdk::BufferPool::Lease other = pool.take(ACCEL_MEMORY_COMM, f32, 8, ACCEL_MEMORY_DEVICE, "b");
    EXPECT_EQ(fake.allocations, 2) << "another shape is another buffer";

    // Three of one shape in flight, then all returned: two stay idle.
    accel::sdk::BufferPool::Lease x = pool.take(ACCEL_MEMORY_COMM, f32, 16, ACCEL_MEMORY_DEVICE, "a");
    accel::sdk::BufferPool::Lease y = pool.take(ACCEL_MEMORY_COMM, f32, 16, ACCEL_MEMORY_DEVICE, "a");
    EXPECT_EQ(fake.allocations, 4);
    again.reset();
    x.reset();
    y.reset();
    EXPECT_EQ(pool.stats().idle, 2);
    EXPECT_EQ(pool.stats().freed, 1);
    EXPECT_EQ(fake.deallocations, 1);
    EXPECT_EQ(pool.stats().reused, 1);
  }
  EXPECT_EQ(fake.deallocations, fake.allocations) << "the pool frees its idle buffers and leases theirs";
}

// ------------------------------------------------------------ checked_math

// Issue 30: products of options wrapped silently. 2^32 x 2^32 is 0 mod 2^64
// (megatron's `world % (tp x pp)` divided by it), 7 x 7905747460161236407 is
// 1 mod 2^64 (it "divided" every world). Both are nullopt; what fits is exact.
TEST(SdkCheckedMath, ProductsAndSumsThatLeaveInt64AreNullopt) {
  EXPECT_FALSE(accel::sdk::checked_mul(int64_t{1} << 32, int64_t{1} << 32).has_value());
  EXPECT_FALSE(accel::sdk::checked_mul(7, 7905747460161236407).has_value());
  EXPECT_FALSE(accel::sdk::checked_mul(INT64_MIN, -1).has_value());
  EXPECT_EQ(accel::sdk::checked_mul(2147483647, 2147483647), int64_t{4611686014132420609});
  EXPECT_EQ(accel::sdk::checked_mul(-3, 4), -12);
  EXPECT_FALSE(accel::sdk::checked_add(INT64_MAX, INT64_MAX).has_value());
  EXPECT_FALSE(accel::sdk::checked_add(INT64_MAX, 1).has_value());
  EXPECT_FALSE(accel::sdk::checked_add(INT64_MIN, -1).has_value());
  EXPECT_EQ(accel::sdk::checked_add(INT64_MAX - 1, 1), INT64_MAX);
}

}  // namespace

// TransposedView: a contiguous 2-D tensor's transpose as strides over the
// same memory; anything else is refused with the tensor described.
TEST(SdkTensor, TransposedViewFlipsAContiguousMatrixAndRefusesOthers) {
  float data[6] = {0, 1, 2, 3, 4, 5};
  int64_t shape[2] = {2, 3};
  int64_t strides[2] = {3, 1};  // the ABI's views always carry strides
  DLTensor m{};
  m.data = data;
  m.device = {kDLCPU, 0};
  m.ndim = 2;
  m.dtype = {kDLFloat, 32, 1};
  m.shape = shape;
  m.strides = strides;
  const accel::sdk::TransposedView t(m);
  EXPECT_EQ(t.get()->shape[0], 3);
  EXPECT_EQ(t.get()->shape[1], 2);
  EXPECT_EQ(t.get()->strides[0], 1);
  EXPECT_EQ(t.get()->strides[1], 3);
  EXPECT_EQ(t.get()->data, static_cast<void*>(data));
  DLTensor flat = m;
  flat.ndim = 1;
  try {
    const accel::sdk::TransposedView refused(flat);
    FAIL() << "a 1-D tensor has no transpose view";
  } catch (const accel::sdk::Error& e) {
    EXPECT_EQ(e.status(), ACCEL_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("contiguous 2-D"), std::string::npos) << e.what();
  }
}
