#include "ir/graph_signature.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace lazyrt::ir {
namespace {

// The working directory with a trailing '/', read once: a program that changes directory later
// still gets the paths it started with.
const std::string& WorkingDirectory() {
  static const std::string* dir = [] {
    char buffer[4096];
    std::string d = getcwd(buffer, sizeof buffer) != nullptr ? buffer : "";
    if (!d.empty() && d.back() != '/') d += '/';
    return new std::string(std::move(d));
  }();
  return *dir;
}

constexpr uint32_t kUnmatched = std::numeric_limits<uint32_t>::max();

// The key pairing nodes across graphs: op, creation site and call stack.
using PairKey = std::tuple<std::string_view, std::string_view, uint16_t>;
PairKey KeyOf(const NodeSignature& n) { return {n.op, n.created_at, n.context}; }

// Rank of each node among the nodes of its graph sharing its PairKey, in post-order.
std::vector<uint32_t> Ranks(const GraphSignature& g) {
  absl::flat_hash_map<PairKey, uint32_t> seen;
  std::vector<uint32_t> rank(g.size());
  for (size_t i = 0; i < g.size(); ++i) rank[i] = seen[KeyOf(g[i])]++;
  return rank;
}

std::string NodeId(const NodeSignature& n, uint32_t rank) {
  return absl::StrCat(n.created_at, "#", n.context, "#", n.op, "#", rank);
}

}  // namespace

std::string DisplayPath(std::string_view path) {
  const std::string& cwd = WorkingDirectory();
  if (!cwd.empty() && path.substr(0, cwd.size()) == cwd) path.remove_prefix(cwd.size());
  // A relative path is relative to the source root lazyrt (or the user's build) mapped its files to;
  // a compiler cache rewrites it relative to the build directory ("../examples/x.cc"): the same file.
  while (path.substr(0, 3) == "../" || path.substr(0, 2) == "./") path.remove_prefix(path[1] == '/' ? 2 : 3);
  return std::string(path);
}

std::string LocationText(const std::source_location& where) {
  if (where.file_name() == nullptr || where.file_name()[0] == '\0') return "";
  return absl::StrCat(DisplayPath(where.file_name()), ":", where.line());
}

const char* DifferenceKindName(DifferenceKind kind) {
  switch (kind) {
    case DifferenceKind::kConstantValue: return "constant value";
    case DifferenceKind::kShape: return "shape";
    case DifferenceKind::kAttribute: return "attribute";
    case DifferenceKind::kPresence: return "presence";
    case DifferenceKind::kStructure: return "structure";
  }
  return "?";
}

GraphSignature SignatureOf(const PostOrder& order) {
  GraphSignature sig;
  sig.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const Node* n = order.nodes()[i];
    NodeSignature s;
    s.op = std::string(OpKindName(n->op()));
    for (size_t o = 0; o < n->num_outputs(); ++o) absl::StrAppend(&s.shape, o ? "," : "", n->shape(o).ToString());
    s.attributes = n->attrs().ToString();
    const auto positions = order.operand_positions(i);
    s.operands.assign(positions.begin(), positions.end());
    s.created_at = LocationText(n->created_at());
    s.context = n->creation_context();
    s.leaf = n->op() == OpKind::kDeviceData;
    sig.push_back(std::move(s));
  }
  return sig;
}

GraphComparison CompareGraphs(const GraphSignature& before, const GraphSignature& now) {
  // Pair nodes by (op, site, stack, rank).
  const std::vector<uint32_t> rank_before = Ranks(before), rank_now = Ranks(now);
  absl::flat_hash_map<std::pair<PairKey, uint32_t>, uint32_t> index_before;
  index_before.reserve(before.size());
  for (size_t i = 0; i < before.size(); ++i)
    index_before[{KeyOf(before[i]), rank_before[i]}] = static_cast<uint32_t>(i);
  std::vector<uint32_t> match_now(now.size(), kUnmatched), match_before(before.size(), kUnmatched);
  for (size_t j = 0; j < now.size(); ++j) {
    auto it = index_before.find({KeyOf(now[j]), rank_now[j]});
    if (it == index_before.end()) continue;
    match_now[j] = it->second;
    match_before[it->second] = static_cast<uint32_t>(j);
  }

  // Places whose node count differs: their nodes pair by rank, which then says nothing.
  absl::flat_hash_map<PairKey, std::pair<uint32_t, uint32_t>> counts;
  for (const NodeSignature& n : before) ++counts[KeyOf(n)].first;
  for (const NodeSignature& n : now) ++counts[KeyOf(n)].second;
  absl::flat_hash_set<PairKey> repeated_reported;

  GraphComparison result;
  auto presence = [&](const GraphSignature& g, const std::vector<uint32_t>& rank, size_t i, bool in_now) {
    const auto [in_before_count, in_now_count] = counts[KeyOf(g[i])];
    if (in_before_count + in_now_count > 1) {
      if (!repeated_reported.insert(KeyOf(g[i])).second) return;
      GraphDifference d;
      d.kind = DifferenceKind::kPresence;
      d.node = i;
      d.before = absl::StrCat(in_before_count, in_before_count == 1 ? " node" : " nodes");
      d.now = absl::StrCat(in_now_count, in_now_count == 1 ? " node" : " nodes");
      d.created_at = g[i].created_at;
      d.context = g[i].context;
      d.leaf = g[i].leaf;
      d.repeated = true;
      d.id = absl::StrCat(g[i].created_at, "#", g[i].context, "#", g[i].op, "#n");
      result.causes.push_back(std::move(d));
      return;
    }
    GraphDifference d;
    d.kind = DifferenceKind::kPresence;
    d.node = i;
    d.before = in_now ? "absent" : "present";
    d.now = in_now ? "present" : "absent";
    d.created_at = g[i].created_at;
    d.context = g[i].context;
    d.leaf = g[i].leaf;
    d.id = NodeId(g[i], rank[i]);
    result.causes.push_back(std::move(d));
  };
  auto cause = [&](DifferenceKind kind, const GraphSignature& g, const std::vector<uint32_t>& rank, size_t i,
                   std::string was, std::string is) {
    GraphDifference d;
    d.kind = kind;
    d.node = i;
    d.before = std::move(was);
    d.now = std::move(is);
    d.created_at = g[i].created_at;
    d.context = g[i].context;
    d.leaf = g[i].leaf;
    d.id = NodeId(g[i], rank[i]);
    result.causes.push_back(std::move(d));
  };

  // A node of `now` is changed when it has no counterpart, or differs from it, or reads a changed
  // operand (it inherits the change: its shape, and attributes derived from shapes such as reshape
  // sizes, follow). Only a node whose operands are all unchanged can be a cause.
  std::vector<bool> changed_now(now.size(), false);
  size_t paired = 0;
  for (size_t j = 0; j < now.size(); ++j) {
    const NodeSignature& b = now[j];
    bool inherited = false;
    for (uint32_t o : b.operands) inherited = inherited || (o < j && changed_now[o]);
    if (match_now[j] == kUnmatched) {
      changed_now[j] = true;
      if (!inherited) presence(now, rank_now, j, /*in_now=*/true);
      continue;
    }
    const NodeSignature& a = before[match_now[j]];
    // Reading what only `before` has (an input no longer given) is inheriting its absence.
    for (uint32_t o : a.operands) inherited = inherited || match_before[o] == kUnmatched;
    bool rewired = a.operands.size() != b.operands.size();
    for (size_t k = 0; !rewired && k < b.operands.size(); ++k) rewired = match_now[b.operands[k]] != a.operands[k];
    const bool differs = rewired || a.attributes != b.attributes || a.shape != b.shape;
    changed_now[j] = inherited || differs;
    ++paired;
    if (inherited || !differs) continue;
    if (rewired) {
      cause(DifferenceKind::kStructure, now, rank_now, j, absl::StrCat(a.op, " of ", a.operands.size(), " operand(s)"),
            absl::StrCat(b.op, " reading other operands"));
    } else if (a.attributes != b.attributes) {
      cause(a.op == "Constant" ? DifferenceKind::kConstantValue : DifferenceKind::kAttribute, now, rank_now, j,
            a.attributes, b.attributes);
    } else {
      cause(DifferenceKind::kShape, now, rank_now, j, a.shape, b.shape);
    }
  }
  // Nodes only `before` has: a cause when their operands still exist unchanged (the first node of a
  // branch no longer taken, an input no longer given).
  std::vector<bool> gone_before(before.size(), false);
  for (size_t i = 0; i < before.size(); ++i) {
    const uint32_t j = match_before[i];
    bool inherited = false;
    for (uint32_t o : before[i].operands) inherited = inherited || (o < i && gone_before[o]);
    if (j != kUnmatched) {
      // Changed in `now`: what reads it in `before` may still be paired; it is not gone.
      continue;
    }
    gone_before[i] = true;
    bool operands_changed = inherited;
    for (uint32_t o : before[i].operands) {
      operands_changed = operands_changed || (match_before[o] != kUnmatched && changed_now[match_before[o]]);
    }
    if (!operands_changed) presence(before, rank_before, i, /*in_now=*/false);
  }
  // A node replaced by another op at the same place is one structural change, not two presences.
  for (size_t p = 0; p < result.causes.size(); ++p) {
    GraphDifference& gone = result.causes[p];
    if (gone.kind != DifferenceKind::kPresence || gone.now != "absent") continue;
    for (size_t q = 0; q < result.causes.size(); ++q) {
      GraphDifference& added = result.causes[q];
      if (added.kind != DifferenceKind::kPresence || added.now != "present" || added.repeated || gone.repeated ||
          added.created_at != gone.created_at || added.context != gone.context) {
        continue;
      }
      added.kind = DifferenceKind::kStructure;
      added.before = absl::StrCat(before[gone.node].op, " ", before[gone.node].shape);
      added.now = absl::StrCat(now[added.node].op, " ", now[added.node].shape);
      result.causes.erase(result.causes.begin() + static_cast<std::ptrdiff_t>(p--));
      break;
    }
  }
  const size_t larger = std::max(before.size(), now.size());
  result.similarity = larger == 0 ? 1.0 : static_cast<double>(paired) / static_cast<double>(larger);
  return result;
}

std::vector<GraphDifference> RootCauses(const GraphSignature& before, const GraphSignature& now) {
  return CompareGraphs(before, now).causes;
}

}  // namespace lazyrt::ir
