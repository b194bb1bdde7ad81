// A first trace: parameters in a Model, operations recorded in a Trace, evaluated on value().
#include <edbatch/edbatch.h>

#include <cmath>
#include <cstdio>

int main() {
  edb::Model model("tiny");
  edb::Parameter W = model.add_parameter("W", 2, 3);  // Glorot-uniform initialised
  edb::Parameter b = model.add_parameter("b", 2, 1);

  edb::Engine engine;        // greedy policy, jit executor, CPU
  edb::Trace trace(engine);  // a recording scope, like a DyNet ComputationGraph
  edb::Expr x = trace.input({1.0f, 2.0f, 3.0f});
  edb::Expr y = edb::tanh(edb::affine({trace.param(b), trace.param(W), x}));  // tanh(b + W x)
  edb::Tensor value = y.value();  // nothing ran until now

  // The same arithmetic by hand; Parameter::values() is column-major.
  for (int r = 0; r < 2; ++r) {
    float z = b.values()[r];
    for (int c = 0; c < 3; ++c) z += W.values()[c * 2 + r] * float(c + 1);
    if (std::fabs(value(r) - std::tanh(z)) > 1e-5f) {
      std::fprintf(stderr, "row %d: %g, expected %g\n", r, value(r), std::tanh(z));
      return 1;
    }
  }
  return 0;
}
