// The commit protocol and resume rule: after commit only `step_N/` exists,
// with a manifest; resume skips `.tmp` directories and checkpoints whose
// manifest does not verify (flipped byte, truncated or missing file, missing
// or malformed manifest) and falls back to the previous step. Crashes are
// simulated by stopping the protocol after each of its steps (files written;
// files synced; manifest written) and checking that resume still returns the
// previous checkpoint and that the next save of that step succeeds.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "host/checkpoint/atomic_dir.h"
#include "host/checkpoint/safetensors.h"

namespace accel::checkpoint {
namespace {
namespace fs = std::filesystem;

class AtomicDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("accel_ckpt_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  static void write_text(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  }
  static std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  // Writes the files of one checkpoint: weights whose values depend on step.
  static void write_step_files(const fs::path& dir, uint64_t step) {
    std::vector<float> weights(256);
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(step * 1000 + i);
    SafetensorsWriter writer;
    writer.add("w", DType::F32, {16, 16}, weights.data(), weights.size() * sizeof(float));
    writer.set_metadata("step", std::to_string(step));
    writer.write(dir / "model.safetensors");
    write_text(dir / "trainer_state.json", "{\"step\": " + std::to_string(step) + "}\n");
  }

  fs::path commit_step(uint64_t step) {
    PendingCheckpointDir pending = PendingCheckpointDir::create(root_, "step_" + std::to_string(step));
    write_step_files(pending.dir(), step);
    pending.commit();
    return pending.final_dir();
  }

  std::vector<std::string> root_entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(root_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path root_;
};

TEST(DescribeFileTest, Crc32IsZlibCrc32) {
  const fs::path path = fs::temp_directory_path() / ("accel_crc_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << "123456789";
  const ManifestEntry entry = describe_file(path);
  fs::remove(path);
  EXPECT_EQ(entry.size, 9u);
  EXPECT_EQ(entry.crc32, 0xCBF43926u);  // the standard CRC-32 check value
}

TEST(CheckpointStepTest, ParsesOnlyCommittedNames) {
  EXPECT_EQ(checkpoint_step("step_0"), 0u);
  EXPECT_EQ(checkpoint_step("step_1200"), 1200u);
  EXPECT_EQ(checkpoint_step("step_18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(checkpoint_step("step_18446744073709551616"), std::nullopt);
  EXPECT_EQ(checkpoint_step("step_12.tmp"), std::nullopt);
  EXPECT_EQ(checkpoint_step("step_12.old.tmp"), std::nullopt);
  EXPECT_EQ(checkpoint_step("step_"), std::nullopt);
  EXPECT_EQ(checkpoint_step("step_-1"), std::nullopt);
  EXPECT_EQ(checkpoint_step("xstep_1"), std::nullopt);
  EXPECT_EQ(checkpoint_step("epoch_3", "epoch_"), 3u);
}

TEST_F(AtomicDirTest, CommitLeavesOnlyTheFinalDirectoryWithAManifest) {
  const fs::path dir = commit_step(10);
  EXPECT_EQ(dir, root_ / "step_10");
  EXPECT_EQ(root_entries(), std::vector<std::string>{"step_10"});

  const Manifest manifest = read_manifest(dir);
  EXPECT_EQ(manifest.format_version, kManifestFormatVersion);
  ASSERT_EQ(manifest.files.size(), 2u);
  EXPECT_EQ(manifest.files[0], describe_file(dir / "model.safetensors"));
  EXPECT_EQ(manifest.files[1], describe_file(dir / "trainer_state.json"));
  EXPECT_EQ(manifest.files[0].size, fs::file_size(dir / "model.safetensors"));

  std::string why = "unset";
  EXPECT_TRUE(verify_manifest(dir, &why));
  EXPECT_EQ(why, "");
  EXPECT_EQ(find_newest_complete(root_), dir);
  EXPECT_EQ(SafetensorsFile::open(dir / "model.safetensors").metadata().at("step"), "10");
}

TEST_F(AtomicDirTest, ManifestIsReadableJson) {
  const std::string text = read_text(commit_step(3) / "manifest.json");
  EXPECT_NE(text.find("\"format\": \"accel-checkpoint-manifest\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"format_version\": 1"), std::string::npos) << text;
  EXPECT_NE(text.find("\"file\": \"model.safetensors\""), std::string::npos) << text;
}

TEST_F(AtomicDirTest, NewestIsChosenByStepNumberNotByName) {
  commit_step(9);
  commit_step(10);
  commit_step(2);
  EXPECT_EQ(find_newest_complete(root_), root_ / "step_10");
}

TEST_F(AtomicDirTest, NoCheckpointsMeansNullopt) {
  EXPECT_EQ(find_newest_complete(root_), std::nullopt);  // root does not exist
  fs::create_directories(root_ / "other");
  write_text(root_ / "step_99", "a file, not a directory");
  EXPECT_EQ(find_newest_complete(root_), std::nullopt);
}

TEST_F(AtomicDirTest, CreateClearsAStaleTmpFromADeadRun) {
  fs::create_directories(root_ / "step_5.tmp");
  write_text(root_ / "step_5.tmp" / "model.safetensors", "half written");
  PendingCheckpointDir pending = PendingCheckpointDir::create(root_, "step_5");
  EXPECT_TRUE(fs::is_empty(pending.dir()));
}

TEST_F(AtomicDirTest, StaleTmpIsIgnoredByResumeEvenWithAManifest) {
  commit_step(10);
  PendingCheckpointDir pending = PendingCheckpointDir::create(root_, "step_20");
  write_step_files(pending.dir(), 20);
  pending.write_manifest(pending.sync_files(pending.list_files()));
  ASSERT_TRUE(verify_manifest(pending.dir()));  // complete, but never published
  std::vector<std::string> skipped;
  EXPECT_EQ(find_newest_complete(root_, "step_", &skipped), root_ / "step_10");
  EXPECT_EQ(skipped, std::vector<std::string>{"step_20.tmp: not committed (ignored)"});
}

TEST_F(AtomicDirTest, CorruptedByteFailsVerificationAndResumeFallsBack) {
  commit_step(10);
  const fs::path newest = commit_step(20);
  {
    std::fstream file(newest / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-3, std::ios::end);
    file.put('\x5a');
  }
  std::string why;
  EXPECT_FALSE(verify_manifest(newest, &why));
  EXPECT_EQ(why.rfind("crc32 mismatch for model.safetensors", 0), 0u) << why;
  std::vector<std::string> skipped;
  EXPECT_EQ(find_newest_complete(root_, "step_", &skipped), root_ / "step_10");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].rfind("step_20: crc32 mismatch", 0), 0u) << skipped[0];
}

TEST_F(AtomicDirTest, TruncatedFileFailsVerificationAndResumeFallsBack) {
  commit_step(10);
  const fs::path newest = commit_step(20);
  fs::resize_file(newest / "model.safetensors", fs::file_size(newest / "model.safetensors") - 1);
  std::string why;
  EXPECT_FALSE(verify_manifest(newest, &why));
  EXPECT_NE(why.find("size of model.safetensors is"), std::string::npos) << why;
  EXPECT_EQ(find_newest_complete(root_), root_ / "step_10");
}

TEST_F(AtomicDirTest, MissingFileOrManifestFailsVerification) {
  commit_step(10);
  const fs::path a = commit_step(20);
  const fs::path b = commit_step(30);
  fs::remove(a / "trainer_state.json");
  fs::remove(b / "manifest.json");
  std::string why;
  EXPECT_FALSE(verify_manifest(a, &why));
  EXPECT_NE(why.find("trainer_state.json"), std::string::npos) << why;
  EXPECT_FALSE(verify_manifest(b, &why));
  EXPECT_NE(why.find("no manifest.json"), std::string::npos) << why;
  std::vector<std::string> skipped;
  EXPECT_EQ(find_newest_complete(root_, "step_", &skipped), root_ / "step_10");
  EXPECT_EQ(skipped.size(), 2u);
}

TEST_F(AtomicDirTest, MalformedManifestsAreRejected) {
  const fs::path dir = commit_step(1);
  const std::string good = read_text(dir / "manifest.json");
  auto expect_bad = [&](const std::string& manifest, const std::string& fragment) {
    write_text(dir / "manifest.json", manifest);
    std::string why;
    EXPECT_FALSE(verify_manifest(dir, &why)) << manifest;
    EXPECT_NE(why.find(fragment), std::string::npos) << why;
  };
  expect_bad("{", "not valid JSON");
  expect_bad("[]", "must be a JSON object");
  expect_bad(R"({"format":"other","format_version":1,"files":[]})", "\"format\" is not");
  expect_bad(R"({"format":"accel-checkpoint-manifest","format_version":2,"files":[]})",
             "format_version 2 is not supported");
  expect_bad(R"({"format":"accel-checkpoint-manifest","format_version":1,"files":[)"
             R"({"file":"../escape","size":1,"crc32":0}]})",
             "invalid file \"../escape\"");
  expect_bad(R"({"format":"accel-checkpoint-manifest","format_version":1,"files":[)"
             R"({"file":"a","size":1,"crc32":0},{"file":"a","size":1,"crc32":0}]})",
             "listed twice");
  expect_bad(R"({"format":"accel-checkpoint-manifest","format_version":1,"files":[)"
             R"({"file":"a","size":1,"crc32":4294967296}]})",
             "\"files[0].crc32\" must be at most 4294967295, got 4294967296");
  write_text(dir / "manifest.json", good);
  EXPECT_TRUE(verify_manifest(dir));
}

// The one JSON rule (accel/sdk/json_input.hpp): a manifest nested 300,000
// deep is refused while it is parsed, and a huge wrong-typed value or file
// name is quoted bounded (the refusal printed entries with dump()).
TEST(ManifestJson, ADeepDocumentAndAHugeValueGiveOneBoundedLine) {
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_manifest(text, "ckpt/manifest.json");
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  };
  const std::string head = R"({"format":"accel-checkpoint-manifest","format_version":1,"files":)";
  EXPECT_EQ(error_of(head + std::string(300000, '[') + std::string(300000, ']') + "}"),
            "ckpt/manifest.json: nests arrays or objects deeper than 64 levels");
  std::string many(2 * (1 << 19), ',');
  for (size_t i = 0; i < many.size(); i += 2) many[i] = '7';
  many.pop_back();
  const std::string huge_name(1 << 20, 'n');
  for (const std::string& files : {
           "[" + many + "]",                                                       // entries that are not objects
           R"([{"file":")" + huge_name + R"(/x","size":1,"crc32":0}])",             // an invalid huge name
           R"([{"file":")" + huge_name + R"(","size":1,"crc32":0},{"file":")" + huge_name + R"(","size":1,"crc32":0}])",
           R"([{"file":"a","size":[)" + many + R"(],"crc32":0}])",                   // a huge wrong-typed size
           std::string(R"([{"file":"a","size":1,"crc32":0.5}])")}) {
    const std::string e = error_of(head + files + "}");
    EXPECT_EQ(e.rfind("ckpt/manifest.json: ", 0), 0u) << e.substr(0, 300);
    EXPECT_LT(e.size(), 300u) << e.substr(0, 300);
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  EXPECT_NE(error_of(head + R"([{"file":"a","size":1,"crc32":0.5}]})").find("\"files[0].crc32\" must be an integer, got 0.5"),
            std::string::npos);
  EXPECT_NE(error_of(head + "[7]}").find("\"files[0]\" must be a JSON object, got 7"), std::string::npos);
}

TEST_F(AtomicDirTest, ManifestThatIsASymlinkIsRefused) {
  commit_step(10);
  const fs::path newest = commit_step(20);
  // A manifest elsewhere, however valid, vouches for nothing in this directory.
  fs::rename(newest / "manifest.json", root_ / "elsewhere.json");
  fs::create_symlink(root_ / "elsewhere.json", newest / "manifest.json");
  std::string why;
  EXPECT_FALSE(verify_manifest(newest, &why));
  EXPECT_NE(why.find("manifest.json: is a symlink, not a regular file"), std::string::npos) << why;
  EXPECT_THROW(read_manifest(newest), CheckpointError);
  EXPECT_EQ(find_newest_complete(root_), root_ / "step_10");
}

TEST_F(AtomicDirTest, FilesTheManifestDoesNotListAreRefused) {
  commit_step(10);
  const fs::path newest = commit_step(20);
  write_text(newest / "plugin_state.rank7.safetensors", "added after the commit");
  std::string why;
  EXPECT_FALSE(verify_manifest(newest, &why));
  EXPECT_EQ(why, "plugin_state.rank7.safetensors is not listed in the manifest");
  std::vector<std::string> skipped;
  EXPECT_EQ(find_newest_complete(root_, "step_", &skipped), root_ / "step_10");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0], "step_20: plugin_state.rank7.safetensors is not listed in the manifest");
  // A directory counts too.
  fs::remove(newest / "plugin_state.rank7.safetensors");
  EXPECT_TRUE(verify_manifest(newest));
  fs::create_directory(newest / "extra");
  EXPECT_FALSE(verify_manifest(newest, &why));
  EXPECT_EQ(why, "extra is not listed in the manifest");
}

TEST_F(AtomicDirTest, FifoManifestIsRefusedWithoutBlocking) {
  const fs::path dir = commit_step(1);
  fs::remove(dir / "manifest.json");
  ASSERT_EQ(::mkfifo((dir / "manifest.json").c_str(), 0600), 0);
  auto verified = std::async(std::launch::async, [&] {
    std::string why;
    verify_manifest(dir, &why);
    return why;
  });
  // The refusal is immediate; the bound only catches a blocked open(),
  // which a writer opening the FIFO then releases so the test can end.
  if (verified.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int fd = ::open((dir / "manifest.json").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "verify_manifest blocked on a FIFO manifest";
  }
  const std::string why = verified.get();
  EXPECT_NE(why.find("manifest.json: is a FIFO, not a regular file"), std::string::npos) << why;
}

// ---------------------------------------------------------------------------
// Crash simulation: stop after each step of the protocol.
// ---------------------------------------------------------------------------

enum class CrashPoint { kAfterWritingFiles, kAfterSyncingFiles, kAfterWritingManifest };

class CrashTest : public AtomicDirTest, public ::testing::WithParamInterface<CrashPoint> {};

TEST_P(CrashTest, PreviousCheckpointSurvivesAndTheStepCanBeSavedAgain) {
  commit_step(10);
  {
    PendingCheckpointDir pending = PendingCheckpointDir::create(root_, "step_20");
    write_step_files(pending.dir(), 20);
    if (GetParam() != CrashPoint::kAfterWritingFiles) {
      const auto entries = pending.sync_files(pending.list_files());
      if (GetParam() == CrashPoint::kAfterWritingManifest) pending.write_manifest(entries);
    }
  }  // the process dies here: the object goes away without committing
  EXPECT_TRUE(fs::exists(root_ / "step_20.tmp"));
  EXPECT_FALSE(fs::exists(root_ / "step_20"));
  EXPECT_EQ(find_newest_complete(root_), root_ / "step_10");

  // The restarted run resumes from step 10 and saves step 20 again.
  commit_step(20);
  EXPECT_EQ(root_entries(), (std::vector<std::string>{"step_10", "step_20"}));
  EXPECT_EQ(find_newest_complete(root_), root_ / "step_20");
}

INSTANTIATE_TEST_SUITE_P(AtEachStep, CrashTest,
                         ::testing::Values(CrashPoint::kAfterWritingFiles,
                                           CrashPoint::kAfterSyncingFiles,
                                           CrashPoint::kAfterWritingManifest),
                         [](const ::testing::TestParamInfo<CrashPoint>& info) {
                           switch (info.param) {
                             case CrashPoint::kAfterWritingFiles: return "AfterWritingFiles";
                             case CrashPoint::kAfterSyncingFiles: return "AfterSyncingFiles";
                             default: return "AfterWritingManifest";
                           }
                         });

TEST_F(AtomicDirTest, CrashAfterSwapBeforeDeletingTheOldDirectoryIsHarmless) {
  // What publish() leaves if it dies between the exchange and the cleanup:
  // the replaced checkpoint sits in step_20.tmp.
  commit_step(20);
  fs::rename(commit_step(10), root_ / "step_20.tmp");
  EXPECT_EQ(find_newest_complete(root_), root_ / "step_20");
  commit_step(20);
  EXPECT_EQ(root_entries(), std::vector<std::string>{"step_20"});
}

// ---------------------------------------------------------------------------
// Replacing an existing step, multi-rank steps, misuse
// ---------------------------------------------------------------------------

TEST_F(AtomicDirTest, SavingAnExistingStepReplacesItWhole) {
  const fs::path dir = commit_step(20);
  write_text(dir / "stray_file_from_old_run", "x");
  PendingCheckpointDir pending = PendingCheckpointDir::create(root_, "step_20");
  write_text(pending.dir() / "only.txt", "new contents");
  pending.commit();
  EXPECT_EQ(root_entries(), std::vector<std::string>{"step_20"});
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "stray_file_from_old_run"));
  EXPECT_EQ(read_text(dir / "only.txt"), "new contents");
  EXPECT_TRUE(verify_manifest(dir));
}

TEST_F(AtomicDirTest, MultiRankStepsCompose) {
  PendingCheckpointDir rank0 = PendingCheckpointDir::create(root_, "step_7");
  PendingCheckpointDir rank1 = PendingCheckpointDir::attach(root_, "step_7");  // after a barrier
  write_text(rank0.dir() / "shard_0.safetensors", "rank zero bytes");
  write_text(rank1.dir() / "shard_1.safetensors", "rank one");
  auto entries = rank0.sync_files({"shard_0.safetensors"});
  const auto from_rank1 = rank1.sync_files({"shard_1.safetensors"});  // gathered to rank 0
  entries.insert(entries.end(), from_rank1.begin(), from_rank1.end());
  rank0.finalize(entries);
  EXPECT_TRUE(rank0.committed());
  EXPECT_FALSE(rank1.committed());
  EXPECT_EQ(read_manifest(root_ / "step_7").files.size(), 2u);
  EXPECT_EQ(find_newest_complete(root_), root_ / "step_7");
}

TEST_F(AtomicDirTest, FinalizeRefusesAManifestThatDoesNotMatchTheDirectory) {
  commit_step(1);
  PendingCheckpointDir pending = PendingCheckpointDir::create(root_, "step_2");
  write_text(pending.dir() / "a", "aaaa");
  write_text(pending.dir() / "b", "bbbb");
  const auto only_a = pending.sync_files({"a"});
  EXPECT_THROW(pending.finalize(only_a), CheckpointError);  // nobody synced b
  auto both = pending.sync_files({"a", "b"});
  write_text(pending.dir() / "b", "bbbbbbbb");  // changed after sync
  try {
    pending.finalize(both);
    FAIL();
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("changed size after sync_files"), std::string::npos);
  }
  both.push_back(both[0]);
  EXPECT_THROW(pending.finalize(both), CheckpointError);  // reported twice
  EXPECT_FALSE(pending.committed());
  EXPECT_EQ(find_newest_complete(root_), root_ / "step_1");
}

TEST_F(AtomicDirTest, MisuseIsRejectedWithClearErrors) {
  EXPECT_THROW(PendingCheckpointDir::create(root_, "a/b"), CheckpointError);
  EXPECT_THROW(PendingCheckpointDir::create(root_, "step_1.tmp"), CheckpointError);
  EXPECT_THROW(PendingCheckpointDir::create(root_, ".."), CheckpointError);
  EXPECT_THROW(PendingCheckpointDir::attach(root_, "step_404"), CheckpointError);

  PendingCheckpointDir pending = PendingCheckpointDir::create(root_, "step_1");
  EXPECT_THROW(pending.publish(), CheckpointError);  // no manifest yet
  EXPECT_THROW(pending.sync_files({"../outside"}), CheckpointError);
  EXPECT_THROW(pending.sync_files({"missing"}), CheckpointError);
  fs::create_directory(pending.dir() / "subdir");
  EXPECT_THROW(pending.commit(), CheckpointError);  // checkpoints are flat
  fs::remove(pending.dir() / "subdir");
  pending.commit();
  EXPECT_THROW(pending.commit(), CheckpointError);  // already committed

  PendingCheckpointDir aborted = PendingCheckpointDir::create(root_, "step_2");
  aborted.abandon();
  EXPECT_EQ(root_entries(), std::vector<std::string>{"step_1"});
}

}  // namespace
}  // namespace accel::checkpoint
