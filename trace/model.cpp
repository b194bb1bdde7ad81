// Model: named parameters and lookup tables, seeded initialisation, and the checksummed file format.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <unordered_map>

#include "ir/files.h"
#include "trace/binary_file.h"
#include "trace/state.h"

namespace edb {

namespace {

std::atomic<uint64_t> next_parameter_uid{1};

constexpr detail::BinaryFormat kModelFile{{'E', 'D', 'B', 'M', 'O', 'D', 'E', 'L'}, 1, "model file"};

// Deterministic uniform floats from a seed and a parameter's name, independent of insertion order.
void fill_uniform(std::vector<float>& values, float scale, uint64_t seed, const std::string& name) {
  std::mt19937_64 rng(seed ^ ir::checksum(name));
  for (float& v : values) {
    const double unit = double(rng() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
    v = static_cast<float>((2.0 * unit - 1.0) * scale);
  }
}

}  // namespace

namespace detail {

ir::ParameterInfo ModelState::info(uint32_t index) const {
  const ParameterStorage& p = *parameters[index];
  return {p.uid, name + "/" + p.name, ir::Shape{p.rows, p.cols}, p.values.data(), &p.version, &p.written_unversioned};
}

}  // namespace detail

float Tensor::scalar() const {
  if (rows != 1 || cols != 1)
    throw UsageError("edb::Tensor::scalar(): tensor is " + std::to_string(rows) + "x" +
                     std::to_string(cols) + ", not 1x1");
  return data[0];
}

const std::string& Parameter::name() const { return model_->at(index_).name; }
int Parameter::rows() const { return model_->at(index_).rows; }
int Parameter::cols() const { return model_->at(index_).cols; }
// May be written through at any time, kept across evaluations too: compiled cells then compare the
// values they packed from before each use (runtime/cell_kernels.cpp), so every write is seen.
std::span<float> Parameter::values() const {
  detail::ParameterStorage& p = model_->at(index_);
  p.written_unversioned = true;
  return p.writable();
}
std::span<const float> Parameter::read() const { return model_->at(index_).values; }

const std::string& LookupTable::name() const { return model_->at(index_).name; }
int LookupTable::dim() const { return model_->at(index_).rows; }
int LookupTable::entries() const { return model_->at(index_).cols; }
std::span<float> LookupTable::values() const { return model_->at(index_).writable(); }

Model::Model(std::string name, uint64_t seed) : state_(std::make_unique<detail::ModelState>()) {
  if (name.empty() || name.find('/') != std::string::npos)
    throw UsageError("edb::Model(): name '" + name + "' must be non-empty and contain no '/'");
  state_->name = std::move(name);
  state_->seed = seed;
}

namespace {

// Every live parameter by uid, so a graph's ParameterInfo (which ir/ keeps model-free) leads back
// to its Model: the backward pass returns gradients by Parameter handle.
struct ParameterRegistry {
  std::mutex mutex;
  std::unordered_map<uint64_t, std::pair<detail::ModelState*, uint32_t>> by_uid;
};

ParameterRegistry& registry() {
  static ParameterRegistry* r = new ParameterRegistry;  // leaked: models may outlive statics
  return *r;
}

}  // namespace

std::pair<detail::ModelState*, uint32_t> detail::find_parameter(uint64_t uid) {
  ParameterRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.by_uid.find(uid);
  return it == r.by_uid.end() ? std::pair<ModelState*, uint32_t>{nullptr, 0} : it->second;
}

Model::~Model() {
  ParameterRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const auto& p : state_->parameters) r.by_uid.erase(p->uid);
}

namespace {

uint32_t add_storage(detail::ModelState& model, const std::string& name, bool is_lookup, int rows,
                     int cols, const char* function) {
  if (name.empty()) throw UsageError(std::string(function) + ": the name is empty");
  if (rows <= 0 || cols <= 0)
    throw UsageError(std::string(function) + ": '" + name + "' has " +
                     (is_lookup ? std::to_string(cols) + " entries of dimension " + std::to_string(rows)
                                : "shape " + std::to_string(rows) + "x" + std::to_string(cols)) +
                     "; both sizes must be positive");
  for (const auto& p : model.parameters)
    if (p->name == name)
      throw UsageError(std::string(function) + ": model '" + model.name +
                       "' already has a parameter named '" + name + "'");
  // Counted in 64 bits before anything is allocated: a model larger than the machine's memory is a
  // UsageError naming the parameter, not a std::bad_alloc.
  uint64_t bytes = uint64_t(rows) * uint64_t(cols) * sizeof(float);
  for (const auto& p : model.parameters) bytes += p->values.size() * sizeof(float);
  if (const uint64_t memory = ir::memory_bytes(); memory > 0 && bytes > memory) {
    char sizes[96];
    std::snprintf(sizes, sizeof sizes, "%.1f GiB, more than the %.1f GiB", double(bytes) / double(1 << 30),
                  double(memory) / double(1 << 30));
    throw UsageError(std::string(function) + ": '" + name + "' (" + std::to_string(rows) + "x" + std::to_string(cols) +
                     " floats) would bring model '" + model.name + "' to " + sizes + " of memory this process may use");
  }
  auto p = std::make_unique<detail::ParameterStorage>();
  p->name = name;
  p->is_lookup = is_lookup;
  p->rows = rows;
  p->cols = cols;
  p->uid = next_parameter_uid.fetch_add(1);
  p->values.resize(size_t(rows) * cols);
  const float scale = is_lookup ? std::sqrt(3.0f / float(rows)) : std::sqrt(6.0f / float(rows + cols));
  fill_uniform(p->values, scale, model.seed, name);
  model.parameters.push_back(std::move(p));
  const uint32_t index = static_cast<uint32_t>(model.parameters.size() - 1);
  ParameterRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  r.by_uid[model.parameters.back()->uid] = {&model, index};
  return index;
}

uint32_t find_storage(const detail::ModelState& model, const std::string& name, bool is_lookup,
                      const char* function) {
  for (uint32_t i = 0; i < model.parameters.size(); ++i)
    if (model.parameters[i]->name == name && model.parameters[i]->is_lookup == is_lookup) return i;
  throw UsageError(std::string(function) + ": model '" + model.name + "' has no " +
                   (is_lookup ? "lookup table" : "parameter") + " named '" + name + "'");
}

}  // namespace

Parameter Model::add_parameter(const std::string& name, int rows, int cols) {
  return Parameter(state_.get(), add_storage(*state_, name, false, rows, cols, "edb::Model::add_parameter()"));
}

LookupTable Model::add_lookup(const std::string& name, int entries, int dim) {
  return LookupTable(state_.get(), add_storage(*state_, name, true, dim, entries, "edb::Model::add_lookup()"));
}

Parameter Model::parameter(const std::string& name) const {
  return Parameter(state_.get(), find_storage(*state_, name, false, "edb::Model::parameter()"));
}

LookupTable Model::lookup(const std::string& name) const {
  return LookupTable(state_.get(), find_storage(*state_, name, true, "edb::Model::lookup()"));
}

std::vector<Parameter> Model::parameters() const {
  std::vector<Parameter> out;
  for (uint32_t i = 0; i < state_->parameters.size(); ++i)
    if (!state_->parameters[i]->is_lookup) out.push_back(Parameter(state_.get(), i));
  return out;
}

std::vector<LookupTable> Model::lookups() const {
  std::vector<LookupTable> out;
  for (uint32_t i = 0; i < state_->parameters.size(); ++i)
    if (state_->parameters[i]->is_lookup) out.push_back(LookupTable(state_.get(), i));
  return out;
}

const std::string& Model::name() const { return state_->name; }
size_t Model::parameter_count() const { return state_->parameters.size(); }

int64_t Model::value_count() const {
  int64_t count = 0;
  for (const auto& p : state_->parameters) count += static_cast<int64_t>(p->values.size());
  return count;
}

namespace {

// The model file's body, piece by piece, to `out(data, bytes)`: the parameter count, then per
// parameter its name, kind, shape and values.
template <typename Out>
void model_file_pieces(const detail::ModelState& state, Out&& out) {
  std::string header;
  detail::put(header, static_cast<uint32_t>(state.parameters.size()));
  out(header.data(), header.size());
  for (const auto& p : state.parameters) {
    header.clear();
    detail::put_string(header, p->name);
    detail::put(header, static_cast<uint8_t>(p->is_lookup));
    detail::put(header, static_cast<int32_t>(p->rows));
    detail::put(header, static_cast<int32_t>(p->cols));
    out(header.data(), header.size());
    out(p->values.data(), p->values.size() * sizeof(float));
  }
}

}  // namespace

std::string detail::model_file_body(const ModelState& state) {
  std::string body;
  model_file_pieces(state, [&](const void* data, size_t size) { body.append(static_cast<const char*>(data), size); });
  return body;
}

uint64_t detail::model_file_checksum(const ModelState& state) {
  ir::Checksum hash;
  model_file_pieces(state, [&](const void* data, size_t size) { hash.add(data, size); });
  return hash.value();
}

const detail::BinaryFormat& detail::model_file_format() { return kModelFile; }

void Model::save(const std::string& path) const {
  detail::write_binary_file(path, kModelFile, detail::model_file_body(*state_), "edb::Model::save()");
}

void Model::load(const std::string& path) {
  const std::string body = detail::read_binary_body(path, kModelFile, "edb::Model::load()");

  // Parse everything before touching the model, so a bad file changes nothing.
  detail::BinaryReader reader(body, path, "edb::Model::load()", detail::kBinaryHeaderBytes);
  const uint32_t count = reader.get<uint32_t>("the entry count");
  if (count != state_->parameters.size())
    reader.fail("has " + std::to_string(count) + " parameters, model '" + state_->name + "' has " +
                std::to_string(state_->parameters.size()));
  std::vector<std::vector<float>> loaded(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t length = reader.get<uint32_t>("a name length");
    const std::string name = reader.get_bytes(length, "a name");
    const bool is_lookup = reader.get<uint8_t>("an entry kind") != 0;
    const int32_t rows = reader.get<int32_t>("a shape");
    const int32_t cols = reader.get<int32_t>("a shape");
    uint32_t index = 0;
    try {
      index = find_storage(*state_, name, is_lookup, "edb::Model::load()");
    } catch (const UsageError&) {
      reader.fail(std::string("the file has ") + (is_lookup ? "lookup table" : "parameter") + " '" +
                  name + "', which model '" + state_->name + "' lacks");
    }
    const detail::ParameterStorage& p = state_->at(index);
    if (p.rows != rows || p.cols != cols)
      reader.fail("'" + name + "' is " + std::to_string(rows) + "x" + std::to_string(cols) +
                  " in the file but " + std::to_string(p.rows) + "x" + std::to_string(p.cols) +
                  " in the model");
    loaded[index] = reader.get_floats(size_t(rows) * cols, "parameter values");
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (loaded[i].empty())
      throw UsageError("edb::Model::load(): '" + path + "' has no values for '" +
                       state_->at(i).name + "'");
  }
  // Copy in place: graphs hold pointers to the parameter storage.
  for (uint32_t i = 0; i < count; ++i) std::copy(loaded[i].begin(), loaded[i].end(), state_->at(i).writable().begin());
}

}  // namespace edb
