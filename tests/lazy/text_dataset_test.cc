#include "lazy/text_dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "lazy/splitmix.h"

namespace lazyrt::data {
namespace text_dataset_test {

using ::testing::HasSubstr;

// Fortunes "f1" ... "fN", each one line.
std::string Fortunes(int n) {
  std::string text;
  // absl::StrCat, not operator+: GCC 12 warns falsely (-Wrestrict) on "f" + std::to_string(i) + ...
  for (int i = 1; i <= n; ++i) absl::StrAppend(&text, "f", i, "\n%\n");
  return text;
}

TEST(TextDatasetTest, EveryTenthFortuneIsValidationTextAndEachEndsWithItsSeparator) {
  absl::StatusOr<TextCorpus> c = BuildCorpus({{"a", Fortunes(25)}}, 4);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train_documents, 23);
  EXPECT_EQ(c->val_documents, 2);
  EXPECT_EQ(c->Decode(c->val), "f10\n%\nf20\n%\n");
  EXPECT_THAT(c->Decode(c->train), ::testing::StartsWith("f1\n%\nf2\n%\n"));
  EXPECT_THAT(c->Decode(c->train), ::testing::Not(HasSubstr("f10")));
  // The vocabulary: the distinct bytes, ascending.
  std::set<uint8_t> bytes;
  for (char ch : Fortunes(25)) bytes.insert(static_cast<uint8_t>(ch));
  EXPECT_EQ(c->vocab, std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

TEST(TextDatasetTest, DocumentsCountAcrossTextsAndPlainTextSplitsAtBlankLines) {
  std::string paragraphs;
  for (int i = 1; i <= 12; ++i) absl::StrAppend(&paragraphs, "p", i, " line\nmore\n\n \n");
  absl::StatusOr<TextCorpus> c = BuildCorpus({{"a", Fortunes(5)}, {"b", paragraphs}}, 4);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train_documents + c->val_documents, 17);
  // The 10th document overall is paragraph 5 of the second text.
  EXPECT_EQ(c->Decode(c->val), "p5 line\nmore\n%\n");
}

TEST(TextDatasetTest, EncodeIsTheInverseOfDecodeAndNamesAnUnknownByte) {
  absl::StatusOr<TextCorpus> c = BuildCorpus({{"a", Fortunes(30)}}, 4);
  ASSERT_TRUE(c.ok());
  absl::StatusOr<std::vector<int32_t>> tokens = c->Encode("f12\n");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(c->Decode(*tokens), "f12\n");
  for (int32_t t : c->train) EXPECT_LT(t, c->vocab_size());
  absl::StatusOr<std::vector<int32_t>> bad = c->Encode("f1z");
  EXPECT_THAT(bad.status().message(), HasSubstr("byte 122 at offset 2 is not in the corpus's vocabulary"));
}

TEST(TextDatasetTest, BadTextsAreErrorsThatNameTheTextAndTheProblem) {
  EXPECT_THAT(BuildCorpus({{"e.txt", ""}}, 4).status().message(), HasSubstr("e.txt: the text is empty"));
  EXPECT_THAT(BuildCorpus({{"n.txt", std::string("ab\0c", 4)}}, 4).status().message(),
              HasSubstr("n.txt: binary data (a NUL byte at offset 2)"));
  std::string controls = "text";
  controls.append(20, '\x01');
  EXPECT_THAT(BuildCorpus({{"c.txt", controls + Fortunes(40)}}, 4).status().message(),
              HasSubstr("c.txt: binary data (20 control bytes"));
  // Overstriking (backspaces), tabs and carriage returns are text.
  EXPECT_TRUE(BuildCorpus({{"t.txt", "a\bb\tc\r\n%\n" + Fortunes(30)}}, 4).ok());
  EXPECT_THAT(BuildCorpus({{"s.txt", Fortunes(30)}}, 1000).status().message(),
              HasSubstr("fewer than one context window plus its target (1000)"));
  EXPECT_THAT(BuildCorpus({}, 4).status().message(), HasSubstr("no text"));
}

TEST(TextDatasetTest, TrainingWindowsAreTheSplitmixDrawsAndTargetsAreTheNextTokens) {
  std::vector<int32_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[static_cast<size_t>(i)] = i;
  std::vector<int64_t> inputs, targets;
  TrainingWindows(tokens, 3, 8, 42, 5, inputs, targets);
  ASSERT_EQ(inputs.size(), 24u);
  for (int64_t row = 0; row < 3; ++row) {
    const auto start = static_cast<int64_t>(splitmix::Draw(42, static_cast<uint64_t>(5 * 3 + row)) % 92);
    for (int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(inputs[static_cast<size_t>(row * 8 + t)], start + t);
      EXPECT_EQ(targets[static_cast<size_t>(row * 8 + t)], start + t + 1);
    }
  }
  std::vector<int64_t> again, again_targets;
  TrainingWindows(tokens, 3, 8, 42, 5, again, again_targets);
  EXPECT_EQ(again, inputs);
  TrainingWindows(tokens, 3, 8, 42, 6, again, again_targets);
  EXPECT_NE(again, inputs);
}

TEST(TextDatasetTest, ValidationWindowsSpanTheTextAndReachItsLastToken) {
  std::vector<int32_t> tokens(50);
  for (int i = 0; i < 50; ++i) tokens[static_cast<size_t>(i)] = i;
  std::vector<int64_t> inputs, targets;
  ValidationWindows(tokens, 2, 4, 4, 0, inputs, targets);
  EXPECT_EQ(inputs.front(), 0);
  ValidationWindows(tokens, 2, 4, 4, 1, inputs, targets);
  EXPECT_EQ(targets.back(), 49);
}

TEST(TextDatasetTest, LoadCorpusReadsADirectorysTextFilesButNotIndexesOrLinks) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("text_dataset_", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "b") << Fortunes(12);
  std::ofstream(dir / "a") << "z1\n%\n";
  std::ofstream(dir / "b.dat") << std::string("\0\0\0\x02", 4);  // strfile's binary index
  std::filesystem::create_symlink(dir / "b", dir / "b.u8");
  absl::StatusOr<TextCorpus> c = LoadCorpus(dir.string(), 4);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->train_documents + c->val_documents, 13);  // a's one fortune, then b's twelve
  EXPECT_THAT(c->Decode(c->train), ::testing::StartsWith("z1\n%\nf1\n%\n"));
  EXPECT_THAT(LoadCorpus((dir / "missing").string(), 4).status().message(), HasSubstr("no such file or directory"));
  std::filesystem::create_directories(dir / "empty");
  EXPECT_THAT(LoadCorpus((dir / "empty").string(), 4).status().message(), HasSubstr("no text files"));
  std::filesystem::remove_all(dir);
}

}  // namespace text_dataset_test
}  // namespace lazyrt::data
