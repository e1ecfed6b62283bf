// Who owns a snapshot root (host/checkpoint/snapshot_root.h): the paths it
// may not be, what it may hold, one job per root, and an end of run that
// removes only what Accel wrote. Issue 50, items 1-4.
#include "host/checkpoint/snapshot_root.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "host/checkpoint/atomic_dir.h"

namespace accel::checkpoint {
namespace {

namespace fs = std::filesystem;

class SnapshotRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("accel_snapshot_root_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "save");
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path save() const { return dir_ / "save"; }
  fs::path root() const { return dir_ / "snaps"; }

  static void touch(const fs::path& file) { std::ofstream(file) << "x"; }

  // The one line claim() refuses with.
  static std::string refusal(const fs::path& root, const fs::path& save, const std::string& run_id) {
    try {
      SnapshotRootClaim::claim(root, save, run_id);
    } catch (const CheckpointError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(SnapshotRootTest, TheSaveDirectoryAnythingAboveItOrInsideItIsRefused) {
  EXPECT_NE(snapshot_root_conflict(save(), save()), std::nullopt);
  EXPECT_NE(snapshot_root_conflict(save() / "." / "", save()), std::nullopt);
  EXPECT_NE(snapshot_root_conflict(dir_, save()), std::nullopt);          // contains it
  EXPECT_NE(snapshot_root_conflict(save() / "snaps", save()), std::nullopt);  // lies inside it
  // Through a symlink: the canonical paths decide.
  fs::create_directory_symlink(save(), dir_ / "link");
  EXPECT_NE(snapshot_root_conflict(dir_ / "link", save()), std::nullopt);
  EXPECT_NE(snapshot_root_conflict(dir_ / "link" / "inner", save()), std::nullopt);
  // Siblings, and a name that merely starts alike, are fine.
  EXPECT_EQ(snapshot_root_conflict(root(), save()), std::nullopt);
  EXPECT_EQ(snapshot_root_conflict(dir_ / "save2", save()), std::nullopt);
  const std::string why = refusal(dir_, save(), "id");
  EXPECT_NE(why.find("contains the --save directory"), std::string::npos) << why;
}

TEST_F(SnapshotRootTest, AFreshRootIsClaimedAndRecordsItsJob) {
  {
    const SnapshotRootClaim claim = SnapshotRootClaim::claim(root(), save(), "run-a");
    EXPECT_TRUE(fs::exists(root() / kSnapshotIdentityFile));
    EXPECT_TRUE(fs::exists(root() / kSnapshotLockFile));
  }
  // The same job again (a restart): accepted, snapshots and all.
  fs::create_directory(root() / "step_4");
  fs::create_directory(root() / "step_6.tmp");
  EXPECT_NO_THROW(SnapshotRootClaim::claim(root(), save(), "run-a"));
}

TEST_F(SnapshotRootTest, AnotherJobIsRefusedWhileItRunsAndAfterwards) {
  {
    const SnapshotRootClaim first = SnapshotRootClaim::claim(root(), save(), "run-a");
    // While the first holds it, even the same --save is refused: two jobs
    // would prune each other's step_N.tmp.
    const std::string busy = refusal(root(), save(), "run-a");
    EXPECT_NE(busy.find("another job is using it now"), std::string::npos) << busy;
  }
  const std::string other = refusal(root(), dir_ / "other_save", "run-b");
  EXPECT_NE(other.find("belongs to one job"), std::string::npos) << other;
  EXPECT_NE(other.find(fs::weakly_canonical(save()).string()), std::string::npos) << other;
  const std::string earlier = refusal(root(), save(), "run-b");
  EXPECT_NE(earlier.find("earlier job with the same --save"), std::string::npos) << earlier;
}

TEST_F(SnapshotRootTest, ARootHoldingFilesOfSomeoneElseIsRefusedAndLeftAsItWas) {
  fs::create_directories(root());
  touch(root() / "notes.txt");
  const std::string why = refusal(root(), save(), "run-a");
  EXPECT_NE(why.find("'notes.txt' is not a file Accel writes there"), std::string::npos) << why;
  EXPECT_FALSE(fs::exists(root() / kSnapshotLockFile));
  EXPECT_FALSE(fs::exists(root() / kSnapshotIdentityFile));
  EXPECT_TRUE(fs::exists(root() / "notes.txt"));
}

TEST_F(SnapshotRootTest, AStepNameThatIsASymlinkOrAFileRefusesTheRoot) {
  {
    const SnapshotRootClaim claim = SnapshotRootClaim::claim(root(), save(), "run-a");
  }
  fs::create_directory(root() / "step_4");
  fs::create_directory_symlink(root() / "step_4", root() / "step_8");
  std::string why = refusal(root(), save(), "run-a");
  EXPECT_NE(why.find("'step_8' is a symbolic link"), std::string::npos) << why;
  fs::remove(root() / "step_8");
  touch(root() / "step_8");
  why = refusal(root(), save(), "run-a");
  EXPECT_NE(why.find("'step_8' is not a directory"), std::string::npos) << why;
}

TEST_F(SnapshotRootTest, StepsWithNoRecordOfTheirJobAreNotAdopted) {
  fs::create_directories(root() / "step_2");
  const std::string why = refusal(root(), save(), "run-a");
  EXPECT_NE(why.find("no record of the job"), std::string::npos) << why;
}

TEST_F(SnapshotRootTest, TheEndOfARunRemovesOnlyWhatAccelWrote) {
  {
    const SnapshotRootClaim claim = SnapshotRootClaim::claim(root(), save(), "run-a");
  }
  fs::create_directories(root() / "step_2");
  touch(root() / "step_2" / "model.safetensors");
  fs::create_directory(root() / "step_4.tmp");
  // Left by someone else after the claim: stays, and so does the root.
  fs::create_directory(dir_ / "elsewhere");
  touch(dir_ / "elsewhere" / "keep");
  fs::create_directory_symlink(dir_ / "elsewhere", root() / "step_9");
  touch(root() / "theirs.txt");
  const std::optional<std::string> left = remove_snapshot_root(root());
  ASSERT_TRUE(left.has_value());
  EXPECT_NE(left->find("holds files Accel did not write"), std::string::npos) << *left;
  EXPECT_TRUE(fs::exists(root() / "theirs.txt"));
  EXPECT_TRUE(fs::exists(dir_ / "elsewhere" / "keep"));  // a link is never followed
  EXPECT_FALSE(fs::exists(root() / "step_2"));
  EXPECT_FALSE(fs::exists(root() / "step_4.tmp"));
  EXPECT_FALSE(fs::exists(root() / kSnapshotIdentityFile));
  // With nothing foreign, the root itself goes.
  fs::remove(root() / "theirs.txt");
  fs::remove(root() / "step_9");
  EXPECT_EQ(remove_snapshot_root(root()), std::nullopt);
  EXPECT_FALSE(fs::exists(root()));
}

TEST_F(SnapshotRootTest, TheJobsRunIdIsWrittenOnceAndReadBack) {
  const std::string id = job_run_id(save());
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(job_run_id(save()), id);
  EXPECT_NE(job_run_id(dir_ / "another"), id);
}

}  // namespace
}  // namespace accel::checkpoint
