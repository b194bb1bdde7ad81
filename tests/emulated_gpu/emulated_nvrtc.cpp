// A stand-in libnvrtc for tests without a GPU (tests/emulated_gpu/README.md): it "compiles" a
// program by keeping its source, and hands the source back as the image (marked as ours), for the
// emulated libcuda beside it to build as host C++ when a module is loaded. Only the functions and
// behaviour nvrtc/nvrtc_compiler.cpp uses.
#include <cstddef>
#include <cstring>
#include <string>

namespace {

constexpr const char* kImageMark = "// edbatch emulated CUDA image\n";

struct Program {
  std::string source, name, image;
  bool compiled = false;
};

}  // namespace

extern "C" {

int nvrtcVersion(int* major, int* minor) {
  *major = 0;  // "0.1": never a real NVRTC's version, so no kernel cache entry is shared with one
  *minor = 1;
  return 0;
}

const char* nvrtcGetErrorString(int result) {
  return result == 0 ? "NVRTC_SUCCESS" : "NVRTC_ERROR (edbatch's emulated NVRTC)";
}

int nvrtcCreateProgram(void** program, const char* source, const char* name, int headers, const char* const*,
                       const char* const*) {
  if (!program || !source || headers != 0) return 3;  // NVRTC_ERROR_INVALID_INPUT
  *program = new Program{source, name ? name : "", "", false};
  return 0;
}

int nvrtcDestroyProgram(void** program) {
  if (!program) return 3;
  delete static_cast<Program*>(*program);
  *program = nullptr;
  return 0;
}

int nvrtcCompileProgram(void* handle, int options, const char* const* values) {
  auto* program = static_cast<Program*>(handle);
  if (!program) return 4;  // NVRTC_ERROR_INVALID_PROGRAM
  // The architectures it claims (nvrtcGetSupportedArchs): another is NVRTC_ERROR_INVALID_OPTION.
  for (int i = 0; i < options; ++i) {
    const std::string option = values[i];
    const std::string prefix = "--gpu-architecture=";
    if (option.rfind(prefix, 0) != 0) continue;
    const std::string arch = option.substr(prefix.size());
    if (arch != "sm_80" && arch != "sm_90" && arch != "compute_80" && arch != "compute_90") return 5;
  }
  program->image = kImageMark + program->source;
  program->compiled = true;
  return 0;
}

int nvrtcGetProgramLogSize(void*, size_t* size) {
  *size = 1;
  return 0;
}

int nvrtcGetProgramLog(void*, char* log) {
  log[0] = '\0';
  return 0;
}

// The PTX and the "cubin" are the same text, NUL-terminated.
int nvrtcGetPTXSize(void* handle, size_t* size) {
  auto* program = static_cast<Program*>(handle);
  if (!program || !program->compiled) return 4;
  *size = program->image.size() + 1;
  return 0;
}

int nvrtcGetPTX(void* handle, char* out) {
  auto* program = static_cast<Program*>(handle);
  if (!program || !program->compiled) return 4;
  std::memcpy(out, program->image.c_str(), program->image.size() + 1);
  return 0;
}

int nvrtcGetCUBINSize(void* handle, size_t* size) { return nvrtcGetPTXSize(handle, size); }
int nvrtcGetCUBIN(void* handle, char* out) { return nvrtcGetPTX(handle, out); }

int nvrtcGetNumSupportedArchs(int* count) {
  *count = 2;
  return 0;
}

int nvrtcGetSupportedArchs(int* archs) {
  archs[0] = 80;
  archs[1] = 90;
  return 0;
}

}  // extern "C"
