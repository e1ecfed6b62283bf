// What merge-weights and export-hf share: finding the checkpoint a user
// named, reading its whole model whoever saved it (any strategy, any world
// size), and publishing an output file atomically. `command` prefixes every
// error ("merge-weights: ...").
//
// Thread-safety: free functions, one caller at a time per output path.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace accel::app {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// DIR itself when it holds a manifest (which must verify), else the newest
// complete step under DIR. Throws CheckpointError.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& dir, const std::string& command);

// Every MODEL-space tensor of `checkpoint` whole, in name order; one that no
// rank saved in full fails naming it. Throws CheckpointError.
NamedTensors read_whole_model(const std::filesystem::path& checkpoint, const std::string& command);

// A temporary name beside `final` that no concurrent writer shares, and the
// durable rename of a fully written (fsynced) temporary onto `final`.
std::filesystem::path temporary_beside(const std::filesystem::path& final);
void publish(const std::filesystem::path& temporary, const std::filesystem::path& final, const std::string& command);

// `final` as a safetensors file (metadata format=pt, as transformers
// expects), appearing atomically.
void write_safetensors_file(const std::filesystem::path& final, const NamedTensors& tensors, const std::string& command);

// `text` as the file `final`, appearing atomically.
void write_text_file(const std::filesystem::path& final, const std::string& text, const std::string& command);

// Creates `dir` (and parents) or throws CheckpointError naming it.
void create_output_directory(const std::filesystem::path& dir, const std::string& command);

}  // namespace accel::app
