// The flight recorder on its own: the ring keeps the newest N operations in
// issue order, a finish for an overwritten record is ignored, and dumps (to
// a string or a file) show pending operations as PENDING — the line a user
// looks for when a job hangs. No communication.
#include "host/comm/flight_recorder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace accel::comm {
namespace {

OpRecord record(uint64_t seq, const std::string& label = "") {
  OpRecord r;
  r.seq = seq;
  r.op = OpType::all_reduce;
  r.dtype = DType::bf16;
  r.count = 1024;
  r.label = label;
  r.issued_us = FlightRecorder::now_us();
  return r;
}

TEST(FlightRecorder, KeepsTheNewestInIssueOrder) {
  FlightRecorder recorder(4);
  for (uint64_t seq = 1; seq <= 10; ++seq) recorder.record_issue(record(seq));
  const std::vector<OpRecord> records = recorder.snapshot();
  ASSERT_EQ(records.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(records[i].seq, 7 + i);
  EXPECT_EQ(recorder.total_recorded(), 10u);
  EXPECT_EQ(recorder.snapshot(2).front().seq, 9u);
}

TEST(FlightRecorder, FinishUpdatesLiveRecordsOnly) {
  FlightRecorder recorder(2);
  recorder.record_issue(record(1));
  recorder.record_issue(record(2));
  recorder.record_issue(record(3));  // overwrites seq 1
  recorder.record_finish(1, OpState::completed);
  recorder.record_finish(2, OpState::completed);
  recorder.record_finish(2, OpState::failed);  // already finished: ignored
  const std::vector<OpRecord> records = recorder.snapshot();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].seq, 2u);
  EXPECT_EQ(records[0].state, OpState::completed);
  EXPECT_GT(records[0].finished_us, 0);
  EXPECT_EQ(records[1].state, OpState::issued);
  EXPECT_EQ(records[1].finished_us, 0);
}

TEST(FlightRecorder, ZeroCapacityRecordsNothing) {
  FlightRecorder recorder(0);
  recorder.record_issue(record(1));
  recorder.record_finish(1, OpState::completed);
  EXPECT_TRUE(recorder.snapshot().empty());
}

TEST(FlightRecorder, DumpShowsPendingOperations) {
  FlightRecorder recorder(8);
  recorder.record_issue(record(1, "ddp bucket 0"));
  recorder.record_issue(record(2, "ddp bucket 1"));
  recorder.record_finish(1, OpState::completed);
  const std::string dump = recorder.dump("flight recorder of rank 0");
  EXPECT_NE(dump.find("flight recorder of rank 0 (2 of 2 operations"), std::string::npos) << dump;
  EXPECT_NE(dump.find("seq=1 all_reduce bf16 x1024 peer=- label='ddp bucket 0'"), std::string::npos) << dump;
  EXPECT_NE(dump.find("completed after"), std::string::npos) << dump;
  EXPECT_NE(dump.find("seq=2 all_reduce bf16 x1024 peer=- label='ddp bucket 1'"), std::string::npos) << dump;
  EXPECT_NE(dump.find("PENDING for"), std::string::npos) << dump;
}

TEST(FlightRecorder, DumpsToAFile) {
  FlightRecorder recorder(8);
  recorder.record_issue(record(1, "x"));
  const std::string path = "/tmp/accel_fr_test_" + std::to_string(::getpid()) + ".txt";
  std::string error;
  ASSERT_TRUE(recorder.dump_to_file(path, "header", &error)) << error;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("seq=1 all_reduce"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_FALSE(recorder.dump_to_file("/nonexistent-dir/fr.txt", "header", &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace accel::comm
