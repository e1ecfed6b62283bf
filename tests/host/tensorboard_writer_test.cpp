// TFRecord framing and the hand-encoded TensorBoard events: CRC-32C against
// its published check value, the record layout byte by byte, and an event's
// protobuf fields decoded back. (python.tensorboard reads whole files back
// with the tensorboard package.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "host/train/tensorboard_writer.h"
#include "host/util/tfrecord.h"

namespace {

using namespace accel;

uint64_t read_le(const std::string& bytes, size_t at, int n) {
  uint64_t value = 0;
  for (int i = 0; i < n; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return value;
}

TEST(TfRecord, Crc32cMatchesTheCheckValue) {
  // The CRC-32C catalogue's check value of "123456789".
  EXPECT_EQ(tfrecord::crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(tfrecord::crc32c(""), 0u);
  const uint32_t crc = tfrecord::crc32c("123456789");
  EXPECT_EQ(tfrecord::masked_crc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TfRecord, FrameIsLengthCrcPayloadCrc) {
  const std::string payload = "hello, board";
  const std::string record = tfrecord::frame(payload);
  ASSERT_EQ(record.size(), 8 + 4 + payload.size() + 4);
  EXPECT_EQ(read_le(record, 0, 8), payload.size());
  EXPECT_EQ(read_le(record, 8, 4), tfrecord::masked_crc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, payload.size()), payload);
  EXPECT_EQ(read_le(record, 12 + payload.size(), 4), tfrecord::masked_crc32c(payload));
}

TEST(TfRecord, AnExistingFileIsNeverAppendedTo) {
  const std::string path = ::testing::TempDir() + "tfrecord_exists";
  std::remove(path.c_str());
  { tfrecord::TfRecordWriter first(path); }
  try {
    tfrecord::TfRecordWriter second(path);
    FAIL() << "a second writer opened " << path;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write '" + path + "': File exists"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(TensorBoardEvent, ScalarEventHasStepAndTaggedFloats) {
  const std::string event = train::scalar_event(1.5, 300, {{"train/loss", 2.25f}});
  size_t at = 0;
  // wall_time: field 1, fixed64 double.
  ASSERT_EQ(static_cast<uint8_t>(event[at++]), (1 << 3) | 1);
  double wall_time = 0;
  std::memcpy(&wall_time, event.data() + at, 8);
  EXPECT_EQ(wall_time, 1.5);
  at += 8;
  // step: field 2, varint 300 = 0xAC 0x02.
  ASSERT_EQ(static_cast<uint8_t>(event[at++]), (2 << 3) | 0);
  EXPECT_EQ(static_cast<uint8_t>(event[at++]), 0xAC);
  EXPECT_EQ(static_cast<uint8_t>(event[at++]), 0x02);
  // summary: field 5 { value: field 1 { tag: field 1, simple_value: field 2 } }.
  ASSERT_EQ(static_cast<uint8_t>(event[at++]), (5 << 3) | 2);
  const size_t summary_size = static_cast<uint8_t>(event[at++]);
  EXPECT_EQ(at + summary_size, event.size());
  ASSERT_EQ(static_cast<uint8_t>(event[at++]), (1 << 3) | 2);
  const size_t value_size = static_cast<uint8_t>(event[at++]);
  EXPECT_EQ(value_size, 2 + 10 + 1 + 4u);
  ASSERT_EQ(static_cast<uint8_t>(event[at++]), (1 << 3) | 2);
  ASSERT_EQ(static_cast<uint8_t>(event[at++]), 10);
  EXPECT_EQ(event.substr(at, 10), "train/loss");
  at += 10;
  ASSERT_EQ(static_cast<uint8_t>(event[at++]), (2 << 3) | 5);
  float value = 0;
  std::memcpy(&value, event.data() + at, 4);
  EXPECT_EQ(value, 2.25f);
}

TEST(TensorBoardEvent, PluginMetricsAndTheLedgerBecomeScalars) {
  train::StepMetrics m;
  m.loss = 3.0;
  m.plugin_metrics["ddp.checksum_spread"] = 0.0;
  m.memory_ledger["total"] = 1024;
  const auto scalars = train::step_scalars(m);
  auto has = [&](const std::string& tag) {
    for (const auto& [t, v] : scalars)
      if (t == tag) return true;
    return false;
  };
  EXPECT_TRUE(has("train/loss"));
  EXPECT_TRUE(has("plugins/ddp.checksum_spread"));
  EXPECT_TRUE(has("memory/ledger_total"));
}

}  // namespace
