// Datasets and the sampler: determinism, world-size invariance, bad files.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>

#include "host/data/batch_sampler.h"
#include "host/data/token_dataset.h"

using namespace accel::data;

namespace {

std::string temp_file(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string uint16_tokens(const std::vector<uint16_t>& tokens) {
  std::string bytes;
  for (uint16_t t : tokens) {
    bytes.push_back(static_cast<char>(t & 0xff));
    bytes.push_back(static_cast<char>(t >> 8));
  }
  return bytes;
}

std::string error_of(const std::string& spec, int64_t seq_len, int64_t vocab) {
  try {
    open_dataset(spec, seq_len, vocab, 1);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Sampler, EveryWorldSizeSeesTheSameGlobalBatch) {
  for (auto order : {accel::DataOrder::shuffled, accel::DataOrder::sequential}) {
    BatchSampler reference(1000, order, 42);
    for (int64_t step = 0; step < 3; ++step) {
      const std::vector<int64_t> global = reference.micro_batch(step, 24, 0, 1, 0, 1);
      for (int world : {2, 3, 4}) {
        for (int64_t accum : {1, 2}) {
          BatchSampler sampler(1000, order, 42);
          std::vector<int64_t> gathered;
          for (int rank = 0; rank < world; ++rank) {
            for (int64_t m = 0; m < accum; ++m) {
              auto part = sampler.micro_batch(step, 24, rank, world, m, accum);
              gathered.insert(gathered.end(), part.begin(), part.end());
            }
          }
          EXPECT_EQ(gathered, global) << "world " << world << " accum " << accum;
        }
      }
    }
  }
}

TEST(Sampler, SequentialIsContiguousAndShuffledIsAPermutationPerEpoch) {
  BatchSampler sequential(100, accel::DataOrder::sequential, 1);
  EXPECT_EQ(sequential.micro_batch(2, 4, 0, 1, 0, 1), (std::vector<int64_t>{8, 9, 10, 11}));
  BatchSampler shuffled(100, accel::DataOrder::shuffled, 1);
  std::set<int64_t> epoch0;
  for (int64_t p = 0; p < 100; ++p) epoch0.insert(shuffled.window_at(p));
  EXPECT_EQ(epoch0.size(), 100u);
  std::vector<int64_t> first, second;
  for (int64_t p = 0; p < 100; ++p) first.push_back(shuffled.window_at(p));
  for (int64_t p = 100; p < 200; ++p) second.push_back(shuffled.window_at(p));
  EXPECT_NE(first, second);  // a fresh permutation each epoch
  BatchSampler other_seed(100, accel::DataOrder::shuffled, 2);
  EXPECT_NE(other_seed.window_at(0) * 1000 + other_seed.window_at(1), first[0] * 1000 + first[1]);
}

TEST(Sampler, ShuffleIsAPermutationAtAwkwardSizes) {
  for (int64_t n : {1, 2, 3, 5, 17, 1000, 4097}) {
    BatchSampler sampler(n, accel::DataOrder::shuffled, 9);
    std::set<int64_t> seen;
    for (int64_t p = 0; p < n; ++p) {
      const int64_t w = sampler.window_at(p);
      ASSERT_TRUE(w >= 0 && w < n) << n;
      seen.insert(w);
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
  }
  // Not the identity: a shuffle actually happens.
  BatchSampler sampler(1000, accel::DataOrder::shuffled, 9);
  int fixed_points = 0;
  for (int64_t p = 0; p < 1000; ++p) fixed_points += sampler.window_at(p) == p;
  EXPECT_LT(fixed_points, 20);
}

TEST(Dataset, SyntheticIsDeterministicAndInVocabulary) {
  auto a = open_dataset("synthetic", 16, 50, 3);
  auto b = open_dataset("synthetic", 16, 50, 3);
  std::vector<int64_t> wa(17), wb(17);
  a->read_window(123, wa);
  b->read_window(123, wb);
  EXPECT_EQ(wa, wb);
  for (int64_t t : wa) EXPECT_TRUE(t >= 0 && t < 50);
}

TEST(Dataset, TokensFileWindowsAreContiguousSlices) {
  std::vector<uint16_t> tokens(50);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i * 7 % 300);
  auto ds = open_dataset("tokens:" + temp_file("tokens.bin", uint16_tokens(tokens)), 4, 300, 1);
  EXPECT_EQ(ds->num_windows(), 10);
  std::vector<int64_t> window(5);
  ds->read_window(3, window);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(window[i], tokens[15 + i]);
}

TEST(Dataset, TextFileBytesAreTokens) {
  auto ds = open_dataset("text:" + temp_file("text.txt", "hello world"), 4, 256, 1);
  std::vector<int64_t> window(5);
  ds->read_window(1, window);
  EXPECT_EQ(window, (std::vector<int64_t>{' ', 'w', 'o', 'r', 'l'}));
}

TEST(Dataset, BadFilesGiveOneClearError) {
  EXPECT_NE(error_of("tokens:/nonexistent/train.bin", 4, 100).find("cannot open"), std::string::npos);
  EXPECT_NE(error_of("tokens:" + temp_file("odd.bin", "abc"), 1, 100).find("whole number"), std::string::npos);
  EXPECT_NE(error_of("tokens:" + temp_file("big.bin", uint16_tokens({1, 2, 999, 3})), 2, 100).find("999"),
            std::string::npos);
  EXPECT_NE(error_of("tokens:" + temp_file("short.bin", uint16_tokens({1, 2})), 4, 100).find("fewer"),
            std::string::npos);
  EXPECT_NE(error_of("text:" + temp_file("t.txt", "hello"), 2, 100).find("256"), std::string::npos);
  EXPECT_NE(error_of("tokens:" + ::testing::TempDir(), 2, 100).find("regular file"), std::string::npos);
}

}  // namespace
