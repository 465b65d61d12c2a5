// A program outside the lazyrt tree, built against the installed package: it traces a graph, then
// compiles and runs it on the device (the whole runtime, through the installed headers and libraries).
#include <cstdio>
#include <memory>

// Every public header, as installed: each must compile from the install tree alone.
#include "lazy/devices.h"
#include "lazy/diagnostics.h"
#include "lazy/error.h"
#include "lazy/host_memory.h"
#include "lazy/metrics.h"
#include "lazy/nn.h"
#include "lazy/optim.h"
#include "lazy/options.h"
#include "lazy/sync.h"
#include "lazy/tensor.h"

int main() {
  lazyrt::Tensor x = lazyrt::Tensor::FromData({1, 2, 3, 4}, {2, 2});
  lazyrt::Tensor y = lazyrt::relu(x * 2.0 - 3.0);
  if (y.shape().ToString() != "f32[2,2]") return 1;
  const unsigned long long hash = lazyrt::graph_hash({y});
  const double total = lazyrt::sum(y).item();  // relu(-1, 1, 3, 5) sums to 9
  if (total != 9) {
    std::printf("consumer computed %g, not 9\n", total);
    return 1;
  }
  auto values = std::make_shared<lazyrt::HostVector<float>>(4, 2.0f);  // read in place from huge pages
  const double in_place = lazyrt::sum(lazyrt::Tensor::FromExternal(*values, {4}, values)).item();
  if (in_place != 8) {
    std::printf("consumer summed a HostVector of four 2s to %g, not 8\n", in_place);
    return 1;
  }
  if (lazyrt::device_count() < 1 || lazyrt::memory_info().bytes_in_use <= 0) {
    std::printf("consumer sees no device memory in use\n");
    return 1;
  }
  std::printf("consumer ok %016llx sum %g\n", hash, total);
  return 0;
}
