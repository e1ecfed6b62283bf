// What the comm services check before a collective leaves the host
// (host/runtime/comm_checks.h): a tensor must lie inside the allocation it
// points into (a buffer from allocate, or the model's flat storage); a
// plugin's own memory passes unless ACCEL_COMM_VERIFY=memory; handles the
// host never issued, or already freed, are refused by the collective and
// work services themselves — one message, no dereference.
#include <gtest/gtest.h>

#include <string>

#include "host/runtime/comm_checks.h"
#include "host/runtime/memory_services.h"
#include "host/runtime/service_support.h"
#include "tests/runtime/services_test_support.h"

namespace accel::runtime::testing {
namespace {

// A 1-d f32 view claiming `count` elements at `data`.
struct FloatView {
  FloatView(void* data, int64_t count) : shape(count) {
    dl.data = data;
    dl.device = DLDevice{kDLCPU, 0};
    dl.ndim = 1;
    dl.dtype = accel_dtype(kDLFloat, 32);
    dl.shape = &shape;
    dl.strides = &stride;
  }
  int64_t shape;
  int64_t stride = 1;
  DLTensor dl{};
};

class CommChecksTest : public ServicesTest {
 protected:
  const DLTensor* allocate16() {
    AccelAllocateArgs args{};
    args.struct_size = sizeof(args);
    args.place = ACCEL_MEMORY_HOST;
    args.category = ACCEL_MEMORY_COMM;
    args.dtype = accel_dtype(kDLFloat, 32);
    args.ndim = 1;
    args.shape = &sixteen_;
    args.label = "bucket";
    EXPECT_EQ(services->memory->allocate(&host, &args), ACCEL_OK) << last_error();
    buffer_ = args.buffer;
    return args.tensor;
  }
  // The message check_tensor_memory fails with, or "" when it passes.
  std::string refusal(const DLTensor& t, bool strict = false) {
    const int64_t bytes = t.shape[0] * 4;
    try {
      check_tensor_memory(context, &t, bytes, "input", strict);
    } catch (const ServiceError& e) {
      EXPECT_EQ(e.status(), ACCEL_ERROR_INVALID_ARGUMENT);
      return e.what();
    }
    return "";
  }
  const int64_t sixteen_ = 16;
  AccelBuffer* buffer_ = nullptr;
};

TEST_F(CommChecksTest, TensorsInsideTheirAllocationPass) {
  const DLTensor* t = allocate16();
  EXPECT_EQ(refusal(*t), "");
  FloatView tail(static_cast<float*>(t->data) + 8, 8);  // the last 8 elements
  EXPECT_EQ(refusal(tail.dl), "");
  FloatView empty(static_cast<float*>(t->data) + 16, 0);
  EXPECT_EQ(refusal(empty.dl), "");
}

TEST_F(CommChecksTest, ATensorRunningPastItsAllocationIsRefusedNamingIt) {
  const DLTensor* t = allocate16();
  FloatView big(t->data, 1024);
  EXPECT_EQ(refusal(big.dl),
            "input (f32 x1024 = 4.00 KiB from byte 0 of its memory) runs 3.94 KiB past the end of allocation "
            "'bucket' (f32 x16, 64 B) of plugin tester");
  FloatView shifted(static_cast<float*>(t->data) + 9, 8);  // one element too far
  EXPECT_NE(refusal(shifted.dl).find("from byte 36 of its memory) runs 4 B past the end of allocation 'bucket'"),
            std::string::npos)
      << refusal(shifted.dl);
}

TEST_F(CommChecksTest, TheLedgerForgetsAFreedBuffer) {
  const DLTensor* t = allocate16();
  const auto extent = context.memory->find_extent(t->data);
  ASSERT_TRUE(extent.has_value());
  EXPECT_EQ(extent->bytes, 64);
  EXPECT_EQ(extent->label, "bucket");
  EXPECT_EQ(extent->owner, "tester");
  EXPECT_TRUE(context.memory->find_extent(static_cast<char*>(t->data) + 63).has_value());
  EXPECT_FALSE(context.memory->find_extent(static_cast<char*>(t->data) + 64).has_value());
  ASSERT_EQ(services->memory->deallocate(&host, buffer_, nullptr), ACCEL_OK);
  EXPECT_FALSE(context.memory->find_extent(reinterpret_cast<void*>(extent->begin)).has_value());
}

TEST_F(CommChecksTest, TheModelsFlatStorageIsCheckedToo) {
  at::Tensor& flat = model->units().front().flat_params();
  ASSERT_TRUE(flat.defined());
  FloatView whole(flat.data_ptr(), flat.numel());
  EXPECT_EQ(refusal(whole.dl), "");
  FloatView over(flat.data_ptr(), flat.numel() + 1);
  EXPECT_NE(refusal(over.dl).find("runs 4 B past the end of the model's flat parameters of unit 0"),
            std::string::npos)
      << refusal(over.dl);
}

TEST_F(CommChecksTest, APluginsOwnMemoryPassesUnlessStrict) {
  float mine[4] = {};
  FloatView own(mine, 4);
  EXPECT_EQ(refusal(own.dl), "");
  EXPECT_EQ(refusal(own.dl, /*strict=*/true),
            "input (16 B) points into no memory the host issued (ACCEL_COMM_VERIFY=memory refuses a plugin's own "
            "memory: allocate it with memory->allocate)");
}

TEST_F(CommChecksTest, BogusAndStaleHandlesAreRefusedByTheServices) {
  const AccelCommServices* comm = services->comm;
  const DLTensor* t = allocate16();
  AccelCollectiveArgs args{};
  args.struct_size = sizeof(args);
  args.input = t;
  args.output = t;
  args.group = reinterpret_cast<AccelGroup*>(uintptr_t{0x1234});
  EXPECT_EQ(comm->all_reduce(&host, &args, nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), "comm.all_reduce: group: group handle 0x1234 is not a group handle this host issued");

  // A work handle passed as a group: same table shape, other tag.
  const uint64_t work = handles_of(context).works.add(std::make_shared<WorkEntry>());
  args.group = group_handle(work);
  EXPECT_EQ(comm->all_gather(&host, &args, nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("is not a group handle this host issued"), std::string::npos) << last_error();

  // A destroyed group: its handle is stale, even for destroy_group itself.
  const uint64_t group = handles_of(context).groups.add(std::make_shared<GroupEntry>());
  ASSERT_NE(handles_of(context).groups.remove(group, nullptr), nullptr);
  args.group = group_handle(group);
  EXPECT_EQ(comm->broadcast(&host, &args, nullptr), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("is stale: its group was destroyed"), std::string::npos) << last_error();
  EXPECT_EQ(comm->destroy_group(&host, group_handle(group)), ACCEL_ERROR_INVALID_ARGUMENT);
  AccelGroupInfo info{};
  info.struct_size = sizeof(info);
  EXPECT_EQ(comm->group_info(&host, group_handle(group), &info), ACCEL_ERROR_INVALID_ARGUMENT);

  int not_a_work = 0;
  EXPECT_EQ(comm->work_wait(&host, reinterpret_cast<AccelWork*>(&not_a_work), nullptr),
            ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("comm.work_wait: work handle 0x"), std::string::npos) << last_error();
  bool done = false;
  EXPECT_EQ(comm->work_test(&host, reinterpret_cast<AccelWork*>(&not_a_work), &done), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(comm->work_free(&host, reinterpret_cast<AccelWork*>(&not_a_work)), ACCEL_ERROR_INVALID_ARGUMENT);
  ASSERT_NE(handles_of(context).works.remove(work, nullptr), nullptr);
  EXPECT_EQ(comm->work_synchronize(&host, work_handle(work)), ACCEL_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("is stale: its work was freed"), std::string::npos) << last_error();
  EXPECT_EQ(comm->work_free(&host, nullptr), ACCEL_OK) << "NULL stays a no-op";
}

TEST(CommVerify, ParsesTheEnvironmentWords) {
  EXPECT_FALSE(parse_comm_verify(nullptr).each_op);
  EXPECT_FALSE(parse_comm_verify("0").each_op);
  EXPECT_TRUE(parse_comm_verify("1").each_op);
  EXPECT_FALSE(parse_comm_verify("ops").strict_memory);
  EXPECT_TRUE(parse_comm_verify("memory").strict_memory);
  const CommVerify both = parse_comm_verify("ops,memory");
  EXPECT_TRUE(both.each_op && both.strict_memory);
  EXPECT_TRUE(parse_comm_verify("all").strict_memory);
  EXPECT_THROW(parse_comm_verify("everything"), std::invalid_argument);
}

}  // namespace
}  // namespace accel::runtime::testing
