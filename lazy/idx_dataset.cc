#include "lazy/idx_dataset.h"

#include <zlib.h>

#include <filesystem>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace lazyrt::data {
namespace {

// The whole (decompressed) content of a file; gzread reads plain files unchanged.
absl::StatusOr<std::string> ReadAll(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  const std::string error = err != Z_OK && err != Z_STREAM_END ? msg : "";
  gzclose(f);
  if (n < 0 || !error.empty()) return absl::DataLossError(absl::StrCat(path, ": corrupt gzip data (", error, ")"));
  return out;
}

uint32_t BigEndian32(const std::string& s, size_t at) {
  return (uint32_t{static_cast<unsigned char>(s[at])} << 24) | (uint32_t{static_cast<unsigned char>(s[at + 1])} << 16) |
         (uint32_t{static_cast<unsigned char>(s[at + 2])} << 8) | uint32_t{static_cast<unsigned char>(s[at + 3])};
}

}  // namespace

absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path) {
  absl::StatusOr<std::string> images = ReadAll(images_path);
  if (!images.ok()) return images.status();
  absl::StatusOr<std::string> labels = ReadAll(labels_path);
  if (!labels.ok()) return labels.status();
  if (images->size() < 16 || BigEndian32(*images, 0) != 0x803) {
    return absl::DataLossError(absl::StrCat(images_path, ": not an IDX image file (magic 0x803)"));
  }
  if (labels->size() < 8 || BigEndian32(*labels, 0) != 0x801) {
    return absl::DataLossError(absl::StrCat(labels_path, ": not an IDX label file (magic 0x801)"));
  }
  Dataset d;
  d.count = BigEndian32(*images, 4);
  d.features = int64_t{BigEndian32(*images, 8)} * BigEndian32(*images, 12);
  if (BigEndian32(*labels, 4) != d.count) {
    return absl::DataLossError(absl::StrCat(images_path, " holds ", d.count, " images but ", labels_path, " ",
                                            BigEndian32(*labels, 4), " labels"));
  }
  if (images->size() != static_cast<size_t>(16 + d.count * d.features) || labels->size() != static_cast<size_t>(8 + d.count)) {
    return absl::DataLossError(absl::StrCat(images_path, " or ", labels_path, " is truncated or has trailing bytes"));
  }
  d.images.resize(static_cast<size_t>(d.count * d.features));
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = static_cast<unsigned char>((*images)[16 + i]) / 255.0f;
  d.labels.resize(static_cast<size_t>(d.count));
  for (size_t i = 0; i < d.labels.size(); ++i) d.labels[i] = static_cast<unsigned char>((*labels)[8 + i]);
  return d;
}

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split) {
  const std::string images = absl::StrCat(dir, "/", split, "-images-idx3-ubyte.gz");
  const std::string labels = absl::StrCat(dir, "/", split, "-labels-idx1-ubyte.gz");
  for (const std::string& f : {images, labels}) {
    if (!std::filesystem::exists(f)) {
      return absl::NotFoundError(absl::StrCat(
          f, " does not exist. Fashion-MNIST is Debian's package dataset-fashion-mnist "
             "(apt-get install dataset-fashion-mnist, or run tools/setup.sh), or pass --data DIR."));
    }
  }
  return LoadIdx(images, labels);
}

Batches::Batches(const Dataset& data, int64_t batch_size, uint64_t seed)
    : data_(data), batch_size_(batch_size), rng_(seed), order_(static_cast<size_t>(data.count)) {
  std::iota(order_.begin(), order_.end(), 0);
  NextEpoch();
}

void Batches::NextEpoch() {
  // Fisher-Yates with our own draws (std::shuffle's algorithm is not specified, so a seed would not
  // mean the same order everywhere).
  for (size_t i = order_.size(); i > 1; --i) {
    std::swap(order_[i - 1], order_[static_cast<size_t>(rng_() % i)]);
  }
}

void Batches::Get(int64_t b, std::vector<float>& images, std::vector<int64_t>& labels) const {
  images.resize(static_cast<size_t>(batch_size_ * data_.features));
  labels.resize(static_cast<size_t>(batch_size_));
  for (int64_t i = 0; i < batch_size_; ++i) {
    const int64_t src = order_[static_cast<size_t>(b * batch_size_ + i)];
    std::copy_n(data_.images.begin() + src * data_.features, data_.features, images.begin() + i * data_.features);
    labels[static_cast<size_t>(i)] = data_.labels[static_cast<size_t>(src)];
  }
}

}  // namespace lazyrt::data
