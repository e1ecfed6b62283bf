// The memory area: accounted allocation (shape, alignment, zero fill, stats
// by category and place, peaks), copies across strides, refusal of foreign
// handles, and CPU streams/events as tokens.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "host/runtime/memory_services.h"
#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

class MemoryServicesTest : public ServicesTest {
 protected:
  const AccelMemoryServices* memory() { return services->memory; }

  AccelAllocateArgs args_for(const std::vector<int64_t>& shape, AccelMemoryCategory category,
                             DLDataType dtype = accel_dtype(kDLFloat, 32)) {
    shape_ = shape;
    AccelAllocateArgs args{};
    args.struct_size = sizeof(AccelAllocateArgs);
    args.place = ACCEL_MEMORY_DEVICE;
    args.category = category;
    args.dtype = dtype;
    args.ndim = static_cast<int32_t>(shape_.size());
    args.shape = shape_.data();
    args.label = "test buffer";
    return args;
  }

  AccelMemoryStats stats(AccelMemoryCategory category, AccelMemoryPlace place = ACCEL_MEMORY_DEVICE) {
    AccelMemoryStats s{};
    s.struct_size = sizeof(AccelMemoryStats);
    EXPECT_EQ(memory()->stats(&host, place, category, &s), ACCEL_OK);
    return s;
  }

  std::vector<int64_t> shape_;
};

TEST_F(MemoryServicesTest, AllocateGivesACompactAlignedZeroedView) {
  AccelAllocateArgs args = args_for({3, 5}, ACCEL_MEMORY_OPTIMIZER);
  args.flags = ACCEL_ALLOCATE_ZERO_FILL;
  args.alignment = 1024;
  ASSERT_EQ(memory()->allocate(&host, &args), ACCEL_OK) << last_error();
  ASSERT_NE(args.buffer, nullptr);
  const DLTensor* t = args.tensor;
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ndim, 2);
  EXPECT_EQ(t->shape[0], 3);
  EXPECT_EQ(t->shape[1], 5);
  EXPECT_EQ(t->strides[0], 5);
  EXPECT_EQ(t->strides[1], 1);
  EXPECT_TRUE(accel_dtype_equal(t->dtype, accel_dtype(kDLFloat, 32)));
  EXPECT_EQ(t->device.device_type, kDLCPU);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(accel_tensor_begin(t)) % 1024, 0u);
  const float* data = static_cast<const float*>(accel_tensor_begin(t));
  for (int i = 0; i < 15; ++i) EXPECT_EQ(data[i], 0.0f);
  EXPECT_EQ(memory()->deallocate(&host, args.buffer, nullptr), ACCEL_OK);
}

TEST_F(MemoryServicesTest, StatsCountBytesByCategoryAndPeaks) {
  // (args_for's shape lives until the next args_for: allocate in between.)
  AccelAllocateArgs a = args_for({256}, ACCEL_MEMORY_PARAMS);
  ASSERT_EQ(memory()->allocate(&host, &a), ACCEL_OK);
  AccelAllocateArgs b = args_for({100}, ACCEL_MEMORY_GRADS, accel_dtype(kDLBfloat, 16));
  ASSERT_EQ(memory()->allocate(&other_host, &b), ACCEL_OK);
  EXPECT_EQ(stats(ACCEL_MEMORY_PARAMS).current_bytes, 1024);
  EXPECT_EQ(stats(ACCEL_MEMORY_GRADS).current_bytes, 200);
  EXPECT_EQ(stats(ACCEL_MEMORY_ALL).current_bytes, 1224);
  EXPECT_EQ(stats(ACCEL_MEMORY_ALL).num_allocs, 2);
  EXPECT_EQ(stats(ACCEL_MEMORY_ALL, ACCEL_MEMORY_HOST).current_bytes, 0);
  EXPECT_EQ(context.memory->live_buffers("tester"), 1);
  EXPECT_EQ(context.memory->live_bytes("other"), 200);

  ASSERT_EQ(memory()->deallocate(&host, a.buffer, nullptr), ACCEL_OK);
  AccelMemoryStats all = stats(ACCEL_MEMORY_ALL);
  EXPECT_EQ(all.current_bytes, 200);
  EXPECT_EQ(all.peak_bytes, 1224);
  EXPECT_EQ(all.num_allocs, 1);
  EXPECT_EQ(stats(ACCEL_MEMORY_PARAMS).peak_bytes, 1024);
  ASSERT_EQ(memory()->reset_peak(&host), ACCEL_OK);
  EXPECT_EQ(stats(ACCEL_MEMORY_ALL).peak_bytes, 200);
  EXPECT_EQ(stats(ACCEL_MEMORY_PARAMS).peak_bytes, 0);

  // Leaks are found and freed after a plugin's teardown.
  EXPECT_EQ(context.memory->free_leaked("other"), 1);
  EXPECT_EQ(stats(ACCEL_MEMORY_ALL).current_bytes, 0);
}

TEST_F(MemoryServicesTest, StatsWritesOnlyWhatTheCallersStructHas) {
  AccelAllocateArgs a = args_for({4}, ACCEL_MEMORY_OTHER);
  ASSERT_EQ(memory()->allocate(&host, &a), ACCEL_OK);
  AccelMemoryStats s{};
  s.struct_size = ACCEL_FIELD_END(AccelMemoryStats, current_bytes);
  s.peak_bytes = -7;
  s.num_allocs = -7;
  ASSERT_EQ(memory()->stats(&host, ACCEL_MEMORY_DEVICE, ACCEL_MEMORY_OTHER, &s), ACCEL_OK);
  EXPECT_EQ(s.current_bytes, 16);
  EXPECT_EQ(s.peak_bytes, -7);
  EXPECT_EQ(s.num_allocs, -7);
  EXPECT_EQ(memory()->deallocate(&host, a.buffer, nullptr), ACCEL_OK);
}

TEST_F(MemoryServicesTest, ForeignOrFreedBuffersAreRefused) {
  AccelAllocateArgs a = args_for({4}, ACCEL_MEMORY_WORKSPACE);
  ASSERT_EQ(memory()->allocate(&host, &a), ACCEL_OK);
  ASSERT_EQ(memory()->deallocate(&host, a.buffer, nullptr), ACCEL_OK);
  EXPECT_EQ(memory()->deallocate(&host, a.buffer, nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("freed twice"), std::string::npos) << last_error();
  EXPECT_EQ(memory()->deallocate(&host, nullptr, nullptr), ACCEL_OK);
  EXPECT_EQ(stats(ACCEL_MEMORY_ALL).num_allocs, 0);
}

TEST_F(MemoryServicesTest, BadAllocateArgumentsAreInvalid) {
  AccelAllocateArgs args = args_for({4}, ACCEL_MEMORY_ALL);
  EXPECT_EQ(memory()->allocate(&host, &args), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("category"), std::string::npos) << last_error();
  args = args_for({4}, ACCEL_MEMORY_PARAMS);
  args.alignment = 48;
  EXPECT_EQ(memory()->allocate(&host, &args), ACCEL_ERROR_INVALID_ARGUMENT);
  args = args_for({-1}, ACCEL_MEMORY_PARAMS);
  EXPECT_EQ(memory()->allocate(&host, &args), ACCEL_ERROR_INVALID_ARGUMENT);
  args = args_for({4}, ACCEL_MEMORY_PARAMS, accel_dtype(99, 8));
  EXPECT_EQ(memory()->allocate(&host, &args), ACCEL_ERROR_INVALID_ARGUMENT);
  args = args_for({4}, ACCEL_MEMORY_PARAMS);
  args.struct_size = 0;  // a plugin that forgot struct_size
  EXPECT_EQ(memory()->allocate(&host, &args), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("struct_size"), std::string::npos) << last_error();
  EXPECT_EQ(memory()->allocate(&host, nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(stats(ACCEL_MEMORY_ALL).num_allocs, 0);
}

TEST_F(MemoryServicesTest, PinnedAndPackedAllocationsAreAccounted) {
  AccelAllocateArgs args = args_for({9}, ACCEL_MEMORY_COMM, accel_dtype(ACCEL_DL_FLOAT4_E2M1FN, 4));
  args.place = ACCEL_MEMORY_HOST_PINNED;
  ASSERT_EQ(memory()->allocate(&host, &args), ACCEL_OK) << last_error();
  EXPECT_EQ(stats(ACCEL_MEMORY_COMM, ACCEL_MEMORY_HOST_PINNED).current_bytes, 5);  // 9 x 4 bits
  EXPECT_EQ(memory()->deallocate(&host, args.buffer, nullptr), ACCEL_OK);
}

TEST_F(MemoryServicesTest, CopyHandlesStridesAndChecksShapes) {
  at::Tensor src = at::arange(12, at::kFloat).reshape({3, 4});
  at::Tensor dst = at::zeros({4, 3}, at::kFloat);
  at::Tensor dst_t = dst.t();  // [3, 4] with strides (1, 3)
  View src_view(src), dst_view(dst_t);
  AccelCopyArgs args{};
  args.struct_size = sizeof(AccelCopyArgs);
  args.src = src_view;
  args.dst = dst_view;
  ASSERT_EQ(memory()->copy(&host, &args), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::equal(dst, src.t()));

  at::Tensor wrong = at::zeros({3, 4}, at::kDouble);
  View wrong_view(wrong);
  args.dst = wrong_view;
  EXPECT_EQ(memory()->copy(&host, &args), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("f64"), std::string::npos) << last_error();
}

// ABI 1.15's flags: a deferred read still copies (on the CPU at once), and
// reserved must stay 0; args of 1.14's size carry no flags.
TEST_F(MemoryServicesTest, CopyTakesTheDeferredReadFlagAndRefusesReservedBits) {
  at::Tensor src = at::arange(6, at::kFloat), dst = at::zeros({6}, at::kFloat);
  View src_view(src), dst_view(dst);
  AccelCopyArgs args{};
  args.struct_size = sizeof(AccelCopyArgs);
  args.src = src_view;
  args.dst = dst_view;
  args.flags = ACCEL_COPY_DEFERRED_READ;
  ASSERT_EQ(memory()->copy(&host, &args), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::equal(dst, src));
  args.reserved = 1;
  EXPECT_EQ(memory()->copy(&host, &args), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("reserved"), std::string::npos) << last_error();
  args.struct_size = offsetof(AccelCopyArgs, flags);  // a 1.14 plugin: the host reads neither field
  dst.zero_();
  ASSERT_EQ(memory()->copy(&host, &args), ACCEL_OK) << last_error();
  EXPECT_TRUE(at::equal(dst, src));
}

TEST_F(MemoryServicesTest, CpuStreamsAreTokens) {
  AccelStream compute = reinterpret_cast<AccelStream>(0x1);
  AccelStream comm = nullptr;
  ASSERT_EQ(memory()->stream_get(&host, ACCEL_STREAM_COMPUTE, &compute), ACCEL_OK);
  ASSERT_EQ(memory()->stream_get(&host, ACCEL_STREAM_COMM, &comm), ACCEL_OK);
  EXPECT_EQ(compute, nullptr);
  EXPECT_NE(comm, nullptr);
  EXPECT_EQ(memory()->stream_synchronize(&host, comm), ACCEL_OK);
  EXPECT_EQ(memory()->stream_destroy(&host, comm), ACCEL_ERROR_INVALID_ARGUMENT);  // host-owned

  AccelStream mine = nullptr;
  ASSERT_EQ(memory()->stream_create(&host, -1, &mine), ACCEL_OK);
  ASSERT_NE(mine, nullptr);
  EXPECT_EQ(memory()->stream_synchronize(&host, mine), ACCEL_OK);
  EXPECT_EQ(memory()->stream_destroy(&host, mine), ACCEL_OK);
  EXPECT_EQ(memory()->stream_synchronize(&host, mine), ACCEL_ERROR_INVALID_ARGUMENT);  // destroyed
  EXPECT_EQ(memory()->stream_get(&host, static_cast<AccelStreamRole>(9), &comm), ACCEL_ERROR_INVALID_ARGUMENT);
}

TEST_F(MemoryServicesTest, EventsRecordHostTime) {
  AccelEvent* start = nullptr;
  AccelEvent* end = nullptr;
  ASSERT_EQ(memory()->event_create(&host, &start), ACCEL_OK);
  ASSERT_EQ(memory()->event_create(&host, &end), ACCEL_OK);
  double ms = -1;
  EXPECT_EQ(memory()->event_elapsed(&host, start, end, &ms), ACCEL_ERROR_FAILED_PRECONDITION);
  ASSERT_EQ(memory()->event_record(&host, start, nullptr), ACCEL_OK);
  ASSERT_EQ(memory()->event_record(&host, end, nullptr), ACCEL_OK);
  bool done = false;
  ASSERT_EQ(memory()->event_query(&host, end, &done), ACCEL_OK);
  EXPECT_TRUE(done);
  EXPECT_EQ(memory()->stream_wait_event(&host, nullptr, end), ACCEL_OK);
  EXPECT_EQ(memory()->event_synchronize(&host, end), ACCEL_OK);
  ASSERT_EQ(memory()->event_elapsed(&host, start, end, &ms), ACCEL_OK);
  EXPECT_GE(ms, 0.0);
  EXPECT_EQ(memory()->event_destroy(&host, start), ACCEL_OK);
  EXPECT_EQ(memory()->event_destroy(&host, end), ACCEL_OK);
  EXPECT_EQ(memory()->event_destroy(&host, end), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(memory()->event_destroy(&host, nullptr), ACCEL_OK);
}

}  // namespace
}  // namespace accel::runtime::testing
