// Errors: edb::UsageError for the caller's mistakes, raised when the op is recorded (not when it
// runs), with a message that starts with the function; edb::InternalError for edbatch's own bugs.
#include <edbatch/edbatch.h>

#include <cstdio>
#include <string>

int main() {
  edb::Model model("m");
  edb::Parameter W = model.add_parameter("W", 4, 3);
  edb::Engine engine;
  int caught = 0;

  edb::Trace trace(engine);
  try {
    edb::matmul(trace.param(W), trace.input({1.0f, 2.0f}));  // 4x3 times 2x1
  } catch (const edb::UsageError& e) {
    std::printf("%s\n", e.what());  // "edb::matmul(): ..." with both shapes
    caught += std::string(e.what()).rfind("edb::matmul()", 0) == 0;
  }

  edb::Expr y = edb::tanh(trace.input({1.0f}));
  trace.finish();  // ends the scope: its expressions become invalid
  try {
    y.value();
  } catch (const edb::UsageError& e) {
    std::printf("%s\n", e.what());
    ++caught;
  }

  try {
    edb::EngineOptions options;
    options.policy = "fastest";
    edb::Engine bad(options);
  } catch (const edb::UsageError& e) {
    std::printf("%s\n", e.what());  // names the policies there are
    ++caught;
  }
  return caught == 3 ? 0 : 1;
}
