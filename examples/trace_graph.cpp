// Traces one layer of an MLP with a softmax on top and prints the graph, its Graphviz form (with
// --dot) and its hash, all without running anything; then reads the result, which runs it. The hash is the same in
// every process that builds this graph: that is what lets a compiled executable be found again.
#include <cstdio>
#include <cstring>
#include <vector>

#include "lazy/sync.h"
#include "lazy/tensor.h"

int main(int argc, char** argv) {
  const bool dot = argc > 1 && std::strcmp(argv[1], "--dot") == 0;
  using lazyrt::Tensor;
  std::vector<float> x_host(4 * 8), w_host(8 * 3, 0.25f), b_host(3, 0.5f);
  for (size_t i = 0; i < x_host.size(); ++i) x_host[i] = static_cast<float>(i) / 10.0f;

  Tensor x = Tensor::FromData(x_host, {4, 8});
  Tensor w = Tensor::FromData(w_host, {8, 3});
  Tensor b = Tensor::FromData(b_host, {3});

  Tensor h = lazyrt::relu(lazyrt::matmul(x, w) + b);
  Tensor scaled = h * 0.5;  // a host scalar: a graph parameter, not a constant
  Tensor probs = lazyrt::softmax(scaled, -1);

  std::fputs((dot ? lazyrt::graph_dot({probs}) : lazyrt::graph_text({probs})).c_str(), stdout);
  std::printf("graph hash: %016llx\n", static_cast<unsigned long long>(lazyrt::graph_hash({probs})));
  if (dot) return 0;

  // Now run it: reading the values is an implicit sync that compiles and executes the graph.
  std::vector<float> values = probs.to_vector<float>();
  std::printf("softmax row 0: %.6f %.6f %.6f\n", values[0], values[1], values[2]);
  return 0;
}
