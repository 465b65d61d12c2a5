// IDX files (the MNIST family's format), gzip-compressed or not, and shuffled batches over them.
// Not part of the runtime (library lazyrt_idx_dataset, not installed): examples, tests and benchmarks
// link it, so the installed core does not pull zlib.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lazyrt::data {

// Images as f32 scaled to [0, 1], labels as i64.
struct Dataset {
  int64_t count = 0;
  int64_t features = 0;  // pixels per image
  std::vector<float> images;
  std::vector<int64_t> labels;
};

// No IDX file this program reads holds more data (Fashion-MNIST's training images are 47 MB).
inline constexpr size_t kMaxIdxBytes = size_t{1} << 30;
inline constexpr int64_t kFashionMnistClasses = 10;

// An IDX image file's bytes (magic 0x803, count, rows, columns, then a byte per pixel) and its label
// file's (0x801, count, then a byte per label): checks the magics, that every count is at least 1,
// that the sizes in the headers are exactly the bytes present (computed without overflow), that
// both files count the same items, and that every label is below `num_classes`. Errors name the
// file (`images_name`, `labels_name`) and what is wrong with it.
absl::StatusOr<Dataset> ParseIdx(const std::string& images, const std::string& labels, int64_t num_classes,
                                 const std::string& images_name, const std::string& labels_name);

// Reads an IDX image file and its label file, gzip-compressed or not: regular files only, at most
// kMaxIdxBytes each once decompressed, then ParseIdx.
absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path, int64_t num_classes);

// Fashion-MNIST from `dir` ("train" or "t10k" split). A missing directory or file is an error that
// says which Debian package provides it (nothing is ever substituted for real data).
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split);
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Epochs of full batches in an order shuffled by a seeded generator (a last partial batch is dropped,
// so every step has the same shapes and the same graph).
class Batches {
 public:
  // INVALID_ARGUMENT unless 1 <= batch_size <= data.count. `data` must outlive the batches.
  static absl::StatusOr<Batches> Create(const Dataset& data, int64_t batch_size, uint64_t seed);
  int64_t per_epoch() const { return static_cast<int64_t>(order_.size()) / batch_size_; }
  // Batch `b` (0 to per_epoch() - 1) of the current epoch: images [batch, features] and labels [batch].
  void Get(int64_t b, std::vector<float>& images, std::vector<int64_t>& labels) const;
  // Reshuffles for the next epoch.
  void NextEpoch();

 private:
  Batches(const Dataset& data, int64_t batch_size, uint64_t seed);

  const Dataset* data_;
  int64_t batch_size_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
};

}  // namespace lazyrt::data
