#include "lazy/text_dataset.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lazy/splitmix.h"

namespace lazyrt::data {
namespace {

namespace fs = std::filesystem;

bool IsTextControl(unsigned char c) {
  return c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\b' && c != '\f';
}

absl::Status CheckText(const std::string& name, const std::string& text) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": the text is empty"));
  int64_t controls = 0, first_control = -1;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": binary data (a NUL byte at offset ", i, "); a plain text file is needed"));
    }
    if (IsTextControl(c)) {
      if (controls++ == 0) first_control = static_cast<int64_t>(i);
    }
  }
  if (controls * 100 > static_cast<int64_t>(text.size())) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": binary data (", controls, " control bytes in ", text.size(),
                                                   ", the first at offset ", first_control,
                                                   "); a plain text file is needed"));
  }
  return absl::OkStatus();
}

// Lines holding only "%" separate fortunes; a text without them is split at blank lines.
std::vector<std::string> Documents(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  const bool fortunes = std::find(lines.begin(), lines.end(), "%") != lines.end();
  std::vector<std::string> docs;
  std::string doc;
  for (const std::string& line : lines) {
    const bool separator = fortunes ? line == "%" : line.find_first_not_of(" \t\r") == std::string::npos;
    if (separator) {
      if (!doc.empty()) docs.push_back(std::move(doc));
      doc.clear();
    } else {
      doc += line;
      doc += '\n';
    }
  }
  if (!doc.empty()) docs.push_back(std::move(doc));
  return docs;
}

absl::StatusOr<std::string> ReadText(const fs::path& path, size_t budget) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path.string(), ": ", ec.message()));
  if (!fs::is_regular_file(status))
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a regular file"));
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path.string(), ": ", ec.message()));
  if (size > budget) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": the corpus would exceed ", kMaxCorpusBytes,
                                                   " bytes (this file has ", size, ")"));
  }
  std::ifstream in(path, std::ios::binary);
  std::string text;
  text.resize(size);
  if (!in.read(text.data(), static_cast<std::streamsize>(size)) || in.gcount() != static_cast<std::streamsize>(size)) {
    return absl::DataLossError(absl::StrCat(path.string(), ": could not read its ", size, " bytes"));
  }
  return text;
}

// Row `row` of a batch: the window of `context` tokens at `start`, and the tokens that follow each.
void CopyWindow(const std::vector<int32_t>& tokens, int64_t context, int64_t row, int64_t start,
                std::vector<int64_t>& inputs, std::vector<int64_t>& targets) {
  const auto first = tokens.begin() + start;
  std::copy(first, first + context, inputs.begin() + row * context);
  std::copy(first + 1, first + context + 1, targets.begin() + row * context);
}

}  // namespace

std::string TextCorpus::Decode(const std::vector<int32_t>& tokens) const {
  std::string text;
  text.reserve(tokens.size());
  for (int32_t t : tokens) text += static_cast<char>(vocab.at(static_cast<size_t>(t)));
  return text;
}

absl::StatusOr<std::vector<int32_t>> TextCorpus::Encode(const std::string& text) const {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    const auto it = std::lower_bound(vocab.begin(), vocab.end(), c);
    if (it == vocab.end() || *it != c) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte ", static_cast<int>(c), " at offset ", i, " is not in the corpus's vocabulary"));
    }
    tokens.push_back(static_cast<int32_t>(it - vocab.begin()));
  }
  return tokens;
}

absl::StatusOr<TextCorpus> BuildCorpus(const std::vector<std::pair<std::string, std::string>>& texts,
                                       int64_t min_tokens) {
  if (texts.empty()) return absl::InvalidArgumentError("no text to read");
  std::string train_text, val_text;
  TextCorpus corpus;
  int64_t index = 0;
  for (const auto& [name, text] : texts) {
    if (absl::Status s = CheckText(name, text); !s.ok()) return s;
    for (std::string& doc : Documents(text)) {
      const bool val = ++index % kValidationEvery == 0;
      (val ? val_text : train_text) += doc + "%\n";
      ++(val ? corpus.val_documents : corpus.train_documents);
    }
  }
  std::array<bool, 256> seen{};
  for (const std::string* t : {&train_text, &val_text}) {
    for (char c : *t) seen[static_cast<uint8_t>(c)] = true;
  }
  for (int b = 0; b < 256; ++b) {
    if (seen[static_cast<size_t>(b)]) corpus.vocab.push_back(static_cast<uint8_t>(b));
  }
  for (auto [text, tokens, split] :
       {std::tuple(&train_text, &corpus.train, "training"), std::tuple(&val_text, &corpus.val, "validation")}) {
    if (static_cast<int64_t>(text->size()) < min_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("the ", split, " text (of ", index, " documents, every ",
                                                     kValidationEvery, "th is validation) has ", text->size(),
                                                     " characters, fewer than one context window plus its target (",
                                                     min_tokens, "): give more text or a shorter context"));
    }
    absl::StatusOr<std::vector<int32_t>> encoded = corpus.Encode(*text);
    if (!encoded.ok()) return encoded.status();
    *tokens = *std::move(encoded);
  }
  return corpus;
}

absl::StatusOr<TextCorpus> LoadCorpus(const std::string& path, int64_t min_tokens) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file or directory",
                                            path == kFortunesDir ? " (Debian's fortunes package provides it)" : ""));
  }
  std::vector<fs::path> files;
  if (fs::is_directory(status)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat") files.push_back(e.path());
    }
    if (ec) return absl::NotFoundError(absl::StrCat(path, ": ", ec.message()));
    if (files.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no text files in the directory"));
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::vector<std::pair<std::string, std::string>> texts;
  size_t total = 0;
  for (const fs::path& f : files) {
    absl::StatusOr<std::string> text = ReadText(f, kMaxCorpusBytes - total);
    if (!text.ok()) return text.status();
    total += text->size();
    texts.emplace_back(f.string(), *std::move(text));
  }
  return BuildCorpus(texts, min_tokens);
}

void TrainingWindows(const std::vector<int32_t>& tokens, int64_t batch, int64_t context, uint64_t seed, int64_t step,
                     std::vector<int64_t>& inputs, std::vector<int64_t>& targets) {
  // The last window starts at size - context - 1: its last target is the last token.
  const auto starts = static_cast<uint64_t>(static_cast<int64_t>(tokens.size()) - context);
  inputs.resize(static_cast<size_t>(batch * context));
  targets.resize(inputs.size());
  for (int64_t i = 0; i < batch; ++i) {
    const auto start = static_cast<int64_t>(splitmix::Draw(seed, static_cast<uint64_t>(step * batch + i)) % starts);
    CopyWindow(tokens, context, i, start, inputs, targets);
  }
}

void ValidationWindows(const std::vector<int32_t>& tokens, int64_t batch, int64_t context, int64_t count, int64_t b,
                       std::vector<int64_t>& inputs, std::vector<int64_t>& targets) {
  const int64_t last_start = static_cast<int64_t>(tokens.size()) - context - 1;
  inputs.resize(static_cast<size_t>(batch * context));
  targets.resize(inputs.size());
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t w = b * batch + i;
    CopyWindow(tokens, context, i, count > 1 ? last_start * w / (count - 1) : 0, inputs, targets);
  }
}

}  // namespace lazyrt::data
