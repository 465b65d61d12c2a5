// Plain text as byte-level tokens for a character-level language model, split into training and
// validation text by document, and windows of it drawn the same way in every peer.
// Not part of the runtime (library lazyrt_text_dataset, not installed): examples, tests and
// benchmarks link it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lazyrt::data {

// Debian's fortunes package (plain text, fortunes separated by lines holding only "%").
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
// No corpus this program reads is larger (Debian's fortunes: 2.6 MB).
inline constexpr size_t kMaxCorpusBytes = size_t{64} << 20;
// Every tenth document (the 10th, 20th, ...) is validation text.
inline constexpr int64_t kValidationEvery = 10;

struct TextCorpus {
  // The distinct bytes of the whole text, ascending: token t stands for byte vocab[t].
  std::vector<uint8_t> vocab;
  // Tokens of the documents, each document followed by the separator line "%\n".
  std::vector<int32_t> train, val;
  int64_t train_documents = 0, val_documents = 0;

  int64_t vocab_size() const { return static_cast<int64_t>(vocab.size()); }
  // The text of `tokens` (each must be below vocab_size()).
  std::string Decode(const std::vector<int32_t>& tokens) const;
  // The tokens of `text`, or an error naming the first byte that is not in the vocabulary.
  absl::StatusOr<std::vector<int32_t>> Encode(const std::string& text) const;
};

// Builds a corpus from named texts. Documents are the fortunes of a text with "%" separator lines, or
// else its paragraphs (separated by blank lines). Errors name the text and say what is wrong: empty,
// binary (a NUL byte, or more than 1% control bytes other than tab, newline, carriage return,
// backspace and form feed; with the offset of the first one), or a split with fewer than
// `min_tokens` tokens (one context window plus its next-token target).
absl::StatusOr<TextCorpus> BuildCorpus(const std::vector<std::pair<std::string, std::string>>& texts,
                                       int64_t min_tokens);

// Reads `path`: one text file, or every regular file of a directory (not following symbolic links;
// the ".dat" index files of fortunes' strfile skipped), in name order; at most kMaxCorpusBytes in all.
absl::StatusOr<TextCorpus> LoadCorpus(const std::string& path, int64_t min_tokens);

// Training windows: row i of step s starts at splitmix::Draw(seed, s * batch + i) modulo
// (tokens - context), so numpy draws the same ones. Inputs [batch, context] and next-token targets.
void TrainingWindows(const std::vector<int32_t>& tokens, int64_t batch, int64_t context, uint64_t seed, int64_t step,
                     std::vector<int64_t>& inputs, std::vector<int64_t>& targets);

// Validation windows: `count` windows spread evenly over the tokens (the same every evaluation);
// window w of batch b is number b * batch + w.
void ValidationWindows(const std::vector<int32_t>& tokens, int64_t batch, int64_t context, int64_t count, int64_t b,
                       std::vector<int64_t>& inputs, std::vector<int64_t>& targets);

}  // namespace lazyrt::data
