// ckpt_allclose A.ckpt B.ckpt TOL: every floating tensor of A (weights and optimizer states) is in
// B with the same dtype and shape and |a - b| <= TOL elementwise. Prints the largest difference;
// exit status 0 when close, 1 otherwise (2 on usage). For the `mpirun loom train` tests
// (train_mpi_test.sh): N ranks x B/N against 1 process x B.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include "checkpoint/checkpoint.h"

int main(int argc, char** argv) {
  using namespace loom;
  if (argc != 4) {
    std::cerr << "usage: ckpt_allclose A.ckpt B.ckpt TOL\n";
    return 2;
  }
  const double tol = std::atof(argv[3]);
  const checkpoint::Checkpoint a = checkpoint::load_checkpoint(argv[1]);
  const checkpoint::Checkpoint b = checkpoint::load_checkpoint(argv[2]);
  double worst = 0;
  std::string worst_name;
  int compared = 0;
  for (const auto& [name, ta] : a.tensors) {
    if (ta.dtype() != DType::kFloat32 && ta.dtype() != DType::kFloat64) continue;
    const Tensor* tb = b.find(name);
    if (tb == nullptr || tb->dtype() != ta.dtype() || tb->shape() != ta.shape()) {
      std::cerr << "ckpt_allclose: " << name << " missing or different in " << argv[2] << "\n";
      return 1;
    }
    for (std::int64_t i = 0; i < ta.numel(); ++i) {
      const double d = std::fabs(ta.get(i) - tb->get(i));
      if (!(d <= worst)) {
        worst = d;
        worst_name = name;
      }
    }
    ++compared;
  }
  std::cout << "ckpt_allclose: " << compared << " tensors, max |a - b| " << worst
            << (worst_name.empty() ? "" : " (" + worst_name + ")") << ", tolerance " << tol
            << "\n";
  return compared > 0 && worst <= tol ? 0 : 1;
}
