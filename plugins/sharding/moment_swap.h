// moment_swap.h — NVMe offload of the AdamW moments (DeepSpeed's
// offload_optimizer device nvme): each swapped unit's exp_avg and
// exp_avg_sq shards live in a file under the swap directory, cut into
// pieces of at most `piece_elements` elements, and host memory holds only
// `slots` swap buffers of one piece's pair each — a bound that does not grow
// with the largest unit (a tied embedding is a third of gpt-small).
// With masters (ZeRO-3's offload_param device nvme, ZeRO-Infinity), each
// piece also holds the fp32 master partition's elements, after the moments:
// the step reads and writes all three together, and a gather reads the
// masters of one unit (read_masters) between passes.
//
// A pass walks units in a given order, piece by piece: while one piece
// steps on its slot, the reads of the next slots-1 pieces and the writes of
// the ones before run on one I/O thread. Its queue is FIFO, so a slot is
// refilled only after its previous piece's write, and a piece read after its
// write sees it; the loop thread never waits for a write, only for the read
// it needs next. A piece never written reads as zeros (AdamW's initial
// moments).
//
// The file is unlinked as soon as it is created: nothing is left on disk
// when the process ends, however it ends. An I/O error (a full disk, a
// failing device) ends the pass that meets it with an Error naming the unit
// and the system's reason; every write of a pass has completed, or failed,
// when the pass returns. Thread-safety: the loop thread calls; the I/O
// thread is private.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace accel::sharding {

class MomentSwap {
 public:
  // `numel[u]`: elements of unit u's moment shards (0: u is not swapped).
  // `slots`: host buffers of at least arrays(with_masters) *
  // slot_elements(numel, piece_elements) floats each, owned by the caller
  // and outliving this object; at least 2 (one steps while the next is
  // read). Creates and unlinks the swap file in `dir`; throws sdk::Error
  // (INVALID_ARGUMENT) when it cannot.
  MomentSwap(const std::string& dir, int32_t rank, std::vector<int64_t> numel, int64_t piece_elements,
             std::vector<float*> slots, bool with_masters = false);
  ~MomentSwap();  // waits for the I/O in flight; closes the file
  MomentSwap(const MomentSwap&) = delete;
  MomentSwap& operator=(const MomentSwap&) = delete;

  // The elements of one moment a slot must hold: the largest piece.
  static int64_t slot_elements(const std::vector<int64_t>& numel, int64_t piece_elements);
  // Arrays per piece: exp_avg, exp_avg_sq (and the master).
  static int arrays(bool with_masters) { return with_masters ? 3 : 2; }
  bool holds_masters() const { return arrays_ == 3; }

  // For each unit of `order` (swapped units only), in order, each piece in
  // order: elements [begin, begin + count) of the unit's moments in a slot
  // (exp_avg = `count` floats, exp_avg_sq the next `count`, with masters the
  // master the `count` after those), then, when `write_back`, written back. Returns when every write has completed.
  // Throws the first I/O error, or what `visit` throws (after draining the
  // I/O in flight).
  using Visit = std::function<void(int32_t unit, int64_t begin, int64_t count, float* exp_avg, float* exp_avg_sq)>;
  void pass(const std::vector<int32_t>& order, bool write_back, const Visit& visit);
  // The same over every swapped unit, in unit order.
  void pass_all(bool write_back, const Visit& visit);

  bool swapped(int32_t unit) const;

  // With masters, outside a pass: unit u's whole master shard (numel[u]
  // floats) read into `into` / written from `from`, on the calling thread.
  // A piece never written reads as zeros. Throws sdk::Error on I/O errors.
  void read_masters(int32_t unit, float* into);
  void write_masters(int32_t unit, const float* from);
  // Bytes read from and written to the file since the last call.
  struct Traffic {
    int64_t read = 0;
    int64_t written = 0;
  };
  Traffic take_traffic();

 private:
  struct Piece {
    int32_t unit = 0;
    int64_t begin = 0;   // element of the unit's moments
    int64_t count = 0;
    int64_t offset = 0;  // bytes into the file: exp_avg, then exp_avg_sq (then the master)
    bool written = false;  // loop thread's view: a write was queued
  };

  std::future<void> enqueue(std::function<void()> job);
  void io_loop();
  void move_piece(bool reading, const Piece& piece, float* slot) const;
  int64_t piece_bytes(const Piece& piece) const { return arrays_ * piece.count * static_cast<int64_t>(sizeof(float)); }

  int arrays_ = 2;
  int fd_ = -1;
  std::string path_;  // for messages: the file no longer has a name
  std::vector<Piece> pieces_;
  std::vector<size_t> first_piece_;  // per unit, into pieces_; SIZE_MAX when not swapped
  std::vector<float*> slots_;
  Traffic traffic_;  // loop thread

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  std::thread io_;
};

}  // namespace accel::sharding
