// Datasets and the sampler: determinism, world-size invariance, bad files.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <future>
#include <set>

#include "host/data/batch_sampler.h"
#include "host/data/held_out.h"
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

// llm.c's .bin (dev/data/data_common.py write_datafile): 256 little-endian
// int32 of header (magic, version, token count, zeros), then the tokens.
std::string llmc_file(int32_t magic, int32_t version, int32_t count, const std::vector<uint32_t>& tokens,
                      int bytes_per_token) {
  std::string bytes(256 * 4, '\0');
  const int32_t fields[] = {magic, version, count};
  for (int f = 0; f < 3; ++f) {
    for (int b = 0; b < 4; ++b) bytes[4 * f + b] = static_cast<char>((static_cast<uint32_t>(fields[f]) >> (8 * b)) & 0xff);
  }
  for (uint32_t t : tokens) {
    for (int b = 0; b < bytes_per_token; ++b) bytes.push_back(static_cast<char>((t >> (8 * b)) & 0xff));
  }
  return bytes;
}

std::vector<int64_t> all_tokens(const TokenDataset& ds) {
  std::vector<int64_t> out;
  std::vector<int64_t> window(static_cast<size_t>(ds.window_length()));
  for (int64_t w = 0; w < ds.num_windows(); ++w) {
    ds.read_window(w, window);
    out.insert(out.end(), window.begin(), window.end());
  }
  return out;
}

TEST(Dataset, LlmcUint16HeaderIsCheckedNotTrainedOn) {
  std::vector<uint32_t> tokens(60);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 811 % 50257);
  // A GPT-2 vocabulary embeds the header's int16 halves as tokens: the bug
  // this pins trained on them silently.
  auto ds = open_dataset("tokens:" + temp_file("llmc_v1.bin", llmc_file(20240520, 1, 60, tokens, 2)), 5, 50257, 1);
  EXPECT_EQ(ds->num_windows(), 10);
  EXPECT_EQ(all_tokens(*ds), std::vector<int64_t>(tokens.begin(), tokens.end()));
  EXPECT_NE(ds->describe().find("llm.c v1 uint16, 60 tokens"), std::string::npos) << ds->describe();
}

TEST(Dataset, LlmcUint32TokensBeyond65535) {
  std::vector<uint32_t> tokens(24);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(70000 + i * 2000);
  auto ds = open_dataset("tokens:" + temp_file("llmc_v7.bin", llmc_file(20240801, 7, 24, tokens, 4)), 3, 128256, 1);
  EXPECT_EQ(ds->num_windows(), 6);
  EXPECT_EQ(all_tokens(*ds), std::vector<int64_t>(tokens.begin(), tokens.end()));
  // The vocabulary check sees the real ids, not uint16 halves.
  EXPECT_NE(error_of("tokens:" + temp_file("llmc_v7b.bin", llmc_file(20240801, 7, 24, tokens, 4)), 3, 100000)
                .find("contains token id 116000"),
            std::string::npos);
}

TEST(Dataset, LlmcBadVersionCountOrMagicIsRefused) {
  const std::vector<uint32_t> tokens(40, 7);
  const auto error = [&](const std::string& name, const std::string& bytes) {
    return error_of("tokens:" + temp_file(name, bytes), 3, 50257);
  };
  std::string e = error("v2.bin", llmc_file(20240520, 2, 40, tokens, 2));
  EXPECT_NE(e.find("has llm.c magic 20240520 but version 2 (this build reads version 1"), std::string::npos) << e;
  e = error("v1_as_u32.bin", llmc_file(20240801, 1, 40, tokens, 4));
  EXPECT_NE(e.find("magic 20240801 but version 1"), std::string::npos) << e;
  e = error("count.bin", llmc_file(20240520, 1, 41, tokens, 2));  // truncated: one token missing
  EXPECT_NE(e.find("the llm.c header says 41 tokens of 2 bytes, but 80 bytes follow the header"), std::string::npos)
      << e;
  e = error("count0.bin", llmc_file(20240520, 1, 0, tokens, 2));
  EXPECT_NE(e.find("header says 0 tokens"), std::string::npos) << e;
  // llm.c's eval files (magic 20240522) have the same header but are not training tokens.
  e = error("magic.bin", llmc_file(20240522, 1, 40, tokens, 2));
  EXPECT_NE(e.find("starts with an llm.c-style header of unknown magic 20240522"), std::string::npos) << e;
}

TEST(Dataset, HeaderlessFilesLongerThanAHeaderStayFlatUint16) {
  // nanoGPT's format: nothing but tokens, even when the file is >= 1 KiB.
  std::vector<uint16_t> tokens(2000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 50257);
  auto ds = open_dataset("tokens:" + temp_file("flat.bin", uint16_tokens(tokens)), 9, 50257, 1);
  EXPECT_EQ(all_tokens(*ds), std::vector<int64_t>(tokens.begin(), tokens.end()));
}

TEST(Dataset, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = ::testing::TempDir() + "tokens_fifo_" + std::to_string(::getpid());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto opened = std::async(std::launch::async, [&] { return error_of("tokens:" + fifo, 4, 100); });
  // The refusal is immediate; the bound only catches a blocked open(),
  // which a writer opening the FIFO then releases so the test can end.
  if (opened.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
    ADD_FAILURE() << "open_dataset blocked on a FIFO";
  }
  const std::string e = opened.get();
  EXPECT_NE(e.find("--data: '" + fifo + "' is a FIFO, not a regular file"), std::string::npos) << e;
  ::unlink(fifo.c_str());
}

}  // namespace

std::vector<int64_t> window(const TokenDataset& d, int64_t index) {
  std::vector<int64_t> out(static_cast<size_t>(d.window_length()));
  d.read_window(index, out);
  return out;
}

TEST(HeldOut, TheTailIsHeldOutAndTrainingKeepsTheRest) {
  std::vector<uint16_t> tokens(10 * 5);  // ten windows of seq_len 4 + 1
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 97);
  const std::string spec = "tokens:" + temp_file("held_out.bin", uint16_tokens(tokens));
  const auto whole = open_dataset(spec, 4, 100, 1);
  const RunDatasets split = open_run_datasets(spec, HeldOutSpec{true, "", 0.25}, 4, 100, 1);
  ASSERT_EQ(split.train->num_windows(), 8);  // floor(10 * 0.25) = 2 held out
  ASSERT_EQ(split.eval->num_windows(), 2);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(window(*split.train, i), window(*whole, i));
  for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(window(*split.eval, i), window(*whole, 8 + i));
  EXPECT_THROW(window(*split.eval, 2), std::out_of_range);  // a slice never reads past its end
  EXPECT_NE(split.eval->describe().find("held out: windows 8..9 of 10"), std::string::npos) << split.eval->describe();

  // Without evaluation every window trains.
  const RunDatasets all = open_run_datasets(spec, HeldOutSpec{false, "", 0.25}, 4, 100, 1);
  EXPECT_EQ(all.train->num_windows(), 10);
  EXPECT_EQ(all.eval, nullptr);
}

TEST(HeldOut, ASplitHoldingOutNothingOrABadEvalFileIsOneLine) {
  const std::string spec = "tokens:" + temp_file("held_out_small.bin", uint16_tokens(std::vector<uint16_t>(3 * 5, 1)));
  const auto message = [&](const HeldOutSpec& held) {
    try {
      open_run_datasets(spec, held, 4, 100, 1);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({true, "", 0.2}).find("--eval-fraction 0.2 of --data's 3 windows of 5 tokens holds out 0"),
            std::string::npos);
  // floor(3 * 0.99) = 2 held out leaves one training window: accepted.
  EXPECT_EQ(message({true, "", 0.99}), "no error");
  const std::string missing = ::testing::TempDir() + "no_such_eval.bin";
  EXPECT_EQ(message({true, "tokens:" + missing, 0.1}).rfind("--eval-data: cannot open '" + missing + "'", 0), 0u)
      << message({true, "tokens:" + missing, 0.1});
}

// ------------------------------------------------------- Megatron indexed data

namespace {

// An .idx as Megatron-LM's MMapIndexedDataset writer lays it out (the
// Python test writes one with numpy too): header, lengths, byte pointers,
// document indices. `pointer_shift` damages one pointer.
std::string megatron_idx(uint8_t dtype, int item, const std::vector<int32_t>& lengths,
                         const std::vector<int64_t>& docs, int64_t pointer_shift = 0, uint64_t version = 1) {
  std::string b("MMIDIDX\0\0", 9);
  const auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(version, 8);
  put(dtype, 1);
  put(lengths.size(), 8);
  put(docs.size(), 8);
  for (int32_t l : lengths) put(static_cast<uint32_t>(l), 4);
  int64_t at = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    put(static_cast<uint64_t>(at + (i == 1 ? pointer_shift : 0)), 8);
    at += int64_t{lengths[i]} * item;
  }
  for (int64_t d : docs) put(static_cast<uint64_t>(d), 8);
  return b;
}

std::string megatron_prefix(const std::string& name, const std::string& idx, const std::string& bin) {
  const std::string prefix = ::testing::TempDir() + name;
  std::ofstream(prefix + ".idx", std::ios::binary) << idx;
  std::ofstream(prefix + ".bin", std::ios::binary) << bin;
  return prefix;
}

}  // namespace

TEST(MegatronDataset, SequencesInIndexOrderAreTheTokenStream) {
  std::vector<uint16_t> tokens(40);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(300 + i);
  const std::string prefix =
      megatron_prefix("mega_u16", megatron_idx(8, 2, {7, 13, 20}, {0, 1, 3}), uint16_tokens(tokens));
  const auto ds = open_dataset("megatron:" + prefix, 9, 400, 1);
  EXPECT_EQ(ds->num_windows(), 4);  // 40 tokens, windows of 10
  const std::vector<int64_t> got = all_tokens(*ds);
  ASSERT_EQ(got.size(), 40u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 300 + static_cast<int64_t>(i));
  EXPECT_NE(ds->describe().find("megatron indexed uint16, 3 sequences"), std::string::npos);
}

TEST(MegatronDataset, Int32TokensReadSigned) {
  std::string bin;
  for (int32_t t : {70000, 5, 6, 7, 8, 9}) {
    for (int b = 0; b < 4; ++b) bin.push_back(static_cast<char>((static_cast<uint32_t>(t) >> (8 * b)) & 0xff));
  }
  const std::string prefix = megatron_prefix("mega_i32", megatron_idx(4, 4, {6}, {0, 1}), bin);
  EXPECT_EQ(all_tokens(*open_dataset("megatron:" + prefix, 2, 80000, 1)),
            (std::vector<int64_t>{70000, 5, 6, 7, 8, 9}));
  std::string negative = bin;
  negative[4] = negative[5] = negative[6] = negative[7] = static_cast<char>(0xff);  // -1
  const std::string bad = megatron_prefix("mega_neg", megatron_idx(4, 4, {6}, {0, 1}), negative);
  EXPECT_NE(error_of("megatron:" + bad, 2, 80000).find("negative token id -1"), std::string::npos);
}

TEST(MegatronDataset, AnIndexThatDoesNotMatchItsBinIsOneLine) {
  const std::string bin = uint16_tokens(std::vector<uint16_t>(20, 1));
  const auto error = [&](const std::string& name, const std::string& idx, const std::string& data) {
    return error_of("megatron:" + megatron_prefix(name, idx, data), 4, 100);
  };
  EXPECT_NE(error("m_short_bin", megatron_idx(8, 2, {10, 10}, {0, 2}), bin.substr(0, 30)).find("does not match"),
            std::string::npos);
  EXPECT_NE(error("m_pointer", megatron_idx(8, 2, {10, 10}, {0, 2}, 2), bin).find("back to back"), std::string::npos);
  EXPECT_NE(error("m_magic", "NOTANIDX" + std::string(40, '\0'), bin).find("MMIDIDX"), std::string::npos);
  EXPECT_NE(error("m_version", megatron_idx(8, 2, {20}, {0, 1}, 0, 2), bin).find("version 2"), std::string::npos);
  EXPECT_NE(error("m_float", megatron_idx(7, 4, {10}, {0, 1}), bin).find("dtype code 7"), std::string::npos);
  EXPECT_NE(error("m_docs", megatron_idx(8, 2, {10, 10}, {0, 1}), bin).find("document indices"), std::string::npos);
  EXPECT_NE(error("m_trunc", megatron_idx(8, 2, {10, 10}, {0, 2}).substr(0, 50), bin).find("truncated"),
            std::string::npos);
  EXPECT_NE(error_of("megatron:/nonexistent/corpus", 4, 100).find("cannot open '/nonexistent/corpus.idx'"),
            std::string::npos);
}

// Issue 30: an .idx of 2 sequences and 0 document indices was accepted
// (the document check ran over no indices). Megatron writes 0 and then each
// document's end, so sequences need at least two.
TEST(MegatronDataset, SequencesWithoutDocumentIndicesAreRefused) {
  const std::string bin = uint16_tokens(std::vector<uint16_t>(20, 1));
  const auto error = [&](const std::string& name, const std::string& idx) {
    return error_of("megatron:" + megatron_prefix(name, idx, bin), 4, 100);
  };
  const std::string none = error("m_no_docs", megatron_idx(8, 2, {10, 10}, {}));
  EXPECT_NE(none.find(".idx has 2 sequences but 0 document indices"), std::string::npos) << none;
  EXPECT_EQ(none.find('\n'), std::string::npos) << none;
  const std::string start_only = error("m_start_only", megatron_idx(8, 2, {10, 10}, {0}));
  EXPECT_NE(start_only.find("2 sequences but 1 document indices"), std::string::npos) << start_only;
  EXPECT_NE(error("m_nothing", megatron_idx(8, 2, {}, {})).find("0 sequences but 0 document indices"),
            std::string::npos);
  // The lengths' sum is checked against the .bin as it grows, not only at
  // the end (a sum of billions of large lengths would overflow first).
  const std::string past = error("m_past_bin", megatron_idx(8, 2, {INT32_MAX, 10}, {0, 2}));
  EXPECT_NE(past.find("describes more than the 40 bytes of its .bin by sequence 0"), std::string::npos) << past;
}
