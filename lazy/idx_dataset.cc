#include "lazy/idx_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "pjrt_sim/status_macros.h"

namespace lazyrt::data {
namespace {

// The whole (decompressed) content of a file, at most kMaxIdxBytes: a small gzip file can expand
// to any size. gzread reads plain files unchanged. Only a regular file is read: a FIFO or a device
// would block or never end.
absl::StatusOr<std::string> ReadAll(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  gzFile f = gzdopen(fd, "rb");  // owns fd from here
  if (f == nullptr) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("cannot read ", path, ": out of memory"));
  }
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) {
    if (out.size() + static_cast<size_t>(n) > kMaxIdxBytes) {
      gzclose(f);
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": more than ", kMaxIdxBytes, " bytes of data; not an IDX file of this program's"));
    }
    out.append(buf, static_cast<size_t>(n));
  }
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

absl::StatusOr<Dataset> ParseIdx(const std::string& images, const std::string& labels, int64_t num_classes,
                                 const std::string& images_name, const std::string& labels_name) {
  if (images.size() < 16 || BigEndian32(images, 0) != 0x803) {
    return absl::DataLossError(absl::StrCat(images_name, ": not an IDX image file (magic 0x803, 16-byte header)"));
  }
  if (labels.size() < 8 || BigEndian32(labels, 0) != 0x801) {
    return absl::DataLossError(absl::StrCat(labels_name, ": not an IDX label file (magic 0x801, 8-byte header)"));
  }
  // Each count is at most 2^32 - 1 and the data at most kMaxIdxBytes, so checking every factor
  // against the bytes present before multiplying keeps every product far from overflow.
  const uint64_t count = BigEndian32(images, 4);
  const uint64_t rows = BigEndian32(images, 8);
  const uint64_t cols = BigEndian32(images, 12);
  const uint64_t pixels = images.size() - 16;
  if (count == 0 || rows == 0 || cols == 0) {
    return absl::DataLossError(absl::StrCat(images_name, ": ", count, " images of ", rows, "x", cols,
                                            " pixels; every count must be at least 1"));
  }
  if (rows > pixels || cols > pixels || rows * cols > pixels || count > pixels / (rows * cols) ||
      count * rows * cols != pixels) {
    return absl::DataLossError(absl::StrCat(images_name, ": the header says ", count, " images of ", rows, "x", cols,
                                            " pixels, but the file holds ", pixels, " pixel bytes"));
  }
  if (BigEndian32(labels, 4) != count) {
    return absl::DataLossError(absl::StrCat(images_name, " holds ", count, " images but ", labels_name, " ",
                                            BigEndian32(labels, 4), " labels"));
  }
  if (labels.size() - 8 != count) {
    return absl::DataLossError(absl::StrCat(labels_name, ": the header says ", count, " labels, but the file holds ",
                                            labels.size() - 8, " label bytes"));
  }
  Dataset d;
  d.count = static_cast<int64_t>(count);
  d.features = static_cast<int64_t>(rows * cols);
  d.labels.resize(count);
  for (size_t i = 0; i < count; ++i) {
    d.labels[i] = static_cast<unsigned char>(labels[8 + i]);
    if (d.labels[i] >= num_classes) {
      return absl::DataLossError(absl::StrCat(labels_name, ": label ", d.labels[i], " of item ", i,
                                              " is not a class of this dataset (0 to ", num_classes - 1, ")"));
    }
  }
  d.images.resize(pixels);
  for (size_t i = 0; i < pixels; ++i) d.images[i] = static_cast<unsigned char>(images[16 + i]) / 255.0f;
  return d;
}

absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path, int64_t num_classes) {
  ASSIGN_OR_RETURN(std::string images, ReadAll(images_path));
  ASSIGN_OR_RETURN(std::string labels, ReadAll(labels_path));
  return ParseIdx(images, labels, num_classes, images_path, labels_path);
}

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split) {
  const std::string images = absl::StrCat(dir, "/", split, "-images-idx3-ubyte.gz");
  const std::string labels = absl::StrCat(dir, "/", split, "-labels-idx1-ubyte.gz");
  for (const std::string& f : {images, labels}) {
    std::error_code error;
    if (!std::filesystem::exists(f, error)) {
      return absl::NotFoundError(
          absl::StrCat(f,
                       " does not exist. Fashion-MNIST is Debian's package dataset-fashion-mnist "
                       "(apt-get install dataset-fashion-mnist, or run tools/setup.sh), or pass --data DIR."));
    }
  }
  return LoadIdx(images, labels, kFashionMnistClasses);
}

absl::StatusOr<Batches> Batches::Create(const Dataset& data, int64_t batch_size, uint64_t seed) {
  if (batch_size < 1 || batch_size > data.count) {
    return absl::InvalidArgumentError(absl::StrCat("a batch of ", batch_size, " from a dataset of ", data.count,
                                                   " items: the batch must be 1 to ", data.count));
  }
  return Batches(data, batch_size, seed);
}

Batches::Batches(const Dataset& data, int64_t batch_size, uint64_t seed)
    : data_(&data), batch_size_(batch_size), rng_(seed), order_(static_cast<size_t>(data.count)) {
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
  const Dataset& data = *data_;
  images.resize(static_cast<size_t>(batch_size_ * data.features));
  labels.resize(static_cast<size_t>(batch_size_));
  for (int64_t i = 0; i < batch_size_; ++i) {
    const int64_t src = order_.at(static_cast<size_t>(b * batch_size_ + i));
    std::copy_n(data.images.begin() + src * data.features, data.features, images.begin() + i * data.features);
    labels[static_cast<size_t>(i)] = data.labels[static_cast<size_t>(src)];
  }
}

}  // namespace lazyrt::data
