// IDX files (the MNIST family's format), gzip-compressed or not, and shuffled batches over them.
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

// Reads an IDX image file (magic 0x803) and its label file (0x801). Errors name the file and what is
// wrong with it.
absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path);

// Fashion-MNIST from `dir` ("train" or "t10k" split). A missing directory or file is an error that
// says which Debian package provides it (nothing is ever substituted for real data).
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split);
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Epochs of full batches in an order shuffled by a seeded generator (a last partial batch is dropped,
// so every step has the same shapes and the same graph).
class Batches {
 public:
  Batches(const Dataset& data, int64_t batch_size, uint64_t seed);
  int64_t per_epoch() const { return static_cast<int64_t>(order_.size()) / batch_size_; }
  // Batch `b` of the current epoch: images [batch, features] and labels [batch].
  void Get(int64_t b, std::vector<float>& images, std::vector<int64_t>& labels) const;
  // Reshuffles for the next epoch.
  void NextEpoch();

 private:
  const Dataset& data_;
  int64_t batch_size_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
};

}  // namespace lazyrt::data
