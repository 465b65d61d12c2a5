// Human output: sizes, durations and times with units, and aligned tables. JSON output never goes
// through here: scripts get raw numbers (bytes, ms, unix ms).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace lazyrt::cli {

// "512 B", "1.5 KiB", "12.3 MiB", "2.00 GiB".
std::string FormatBytes(uint64_t bytes);

// "0 ms", "0.042 ms", "3.14 ms", "512.0 ms", "12.35 s": enough digits to compare at a glance.
std::string FormatMs(double ms);

// "2024-05-01 13:45:07" in the local time zone; "-" for the infinite past (never set).
std::string FormatLocalTime(absl::Time time);

// "3x4x5" for dims {3, 4, 5}; "scalar" for none.
std::string FormatDims(const std::vector<int64_t>& dims);

// Label/value lines, the values aligned in one column: "entries   2 (1.2 MiB)".
void PrintFields(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& fields, int indent = 0);

enum class Align { kLeft, kRight };

struct Column {
  std::string header;
  Align align = Align::kLeft;
};

// Rows of cells printed under a header row, each column as wide as its widest cell. Numbers are
// right-aligned so their digits line up; lines have no trailing spaces.
class Table {
 public:
  explicit Table(std::vector<Column> columns);

  // A row with one cell per column.
  void AddRow(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }

  // Every line starts with `indent` spaces.
  void Print(std::ostream& out, int indent = 0) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace lazyrt::cli
