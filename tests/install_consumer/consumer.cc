// A program outside the lazyrt tree, built against the installed package.
#include <cstdio>

#include "lazy/tensor.h"

int main() {
  lazyrt::Tensor x = lazyrt::Tensor::FromData({1, 2, 3, 4}, {2, 2});
  lazyrt::Tensor y = lazyrt::relu(x * 2.0 - 3.0);
  if (y.shape().ToString() != "f32[2,2]") return 1;
  std::printf("consumer ok %016llx\n", static_cast<unsigned long long>(lazyrt::graph_hash({y})));
  return 0;
}
