// Signature strings and their interning. The binary key mirrors the string field by field, so key
// equality and string equality agree (except the "#n" disambiguation of same-named parameters).
#include "ir/signature.h"

#include <bit>
#include <cstring>
#include <sstream>
#include <utility>

#include "edbatch/errors.h"

namespace edb::ir {

namespace {

void append_word(std::string& key, uint64_t word) {
  char bytes[sizeof word];
  std::memcpy(bytes, &word, sizeof word);
  key.append(bytes, sizeof word);
}

uint64_t pack(Shape s) { return (uint64_t{static_cast<uint32_t>(s.rows)} << 32) | uint32_t(s.cols); }

// Identity of an argument that is shared by every member of a batch: a parameter.
const ParameterInfo* shared_parameter(const Graph& graph, NodeId arg) {
  const Node& a = graph.node(arg);
  return a.op == Op::parameter ? &graph.parameter(a.attrs.parameter) : nullptr;
}

// An argument's shape as a signature says it: a batch call's is one member's frame, a batch
// node's one member's column (ir::NodeBatch), as its
// readers read one member's rows at a time (a weight gradient's terms, a view), so that readers
// of batches of any size share a type.
Shape argument_shape(const Graph& graph, NodeId arg) {
  const Node& a = graph.node(arg);
  return is_call_batch(a) ? Shape{int32_t(graph.cell(a.attrs.index).frame_floats), 1} : member_shape(a);
}

// What the signature says of one argument: its shape, and the parameter (uid) or cell it is.
std::pair<uint64_t, uint64_t> argument_words(const Graph& graph, NodeId arg) {
  const ParameterInfo* p = shared_parameter(graph, arg);
  const Node& a = graph.node(arg);
  // A cell call's frame is only ever read through its outputs' views: they are the cell's own.
  return {pack(argument_shape(graph, arg)),
          p ? p->uid : a.op == Op::call ? reinterpret_cast<uintptr_t>(&graph.cell(a.attrs.index)) : 0};
}

// A long argument list that repeats one short group (a weight gradient's (dy, x) pairs, a sum of
// many values of one shape): the group's length, or 0. Its signature names the group once and the
// repetitions, so a node of thousands of arguments has a key of a few words, not one per argument
// (one type per distinct length of such a list, kept until the table resets).
constexpr size_t kLongArguments = 8, kLongestGroup = 4;
size_t repeated_group(const Graph& graph, std::span<const NodeId> args) {
  if (args.size() <= kLongArguments) return 0;
  // The arguments' nodes lie anywhere in the graph: each is fetched well before it is compared,
  // or a list of thousands waits on one cache miss after another.
  constexpr size_t kAhead = 16;
  for (size_t period = 1; period <= kLongestGroup; ++period) {
    if (args.size() % period) continue;
    bool repeats = true;
    for (size_t i = period; i < args.size() && repeats; ++i) {
      if (i + kAhead < args.size()) __builtin_prefetch(&graph.node(args[i + kAhead]));
      repeats = argument_words(graph, args[i]) == argument_words(graph, args[i - period]);
    }
    if (repeats) return period;
  }
  return 0;
}

// Node id's key into `key`; returns its arguments' repeated group (repeated_group()).
size_t build_key(const Graph& graph, NodeId id, std::string& key) {
  const Node& n = graph.node(id);
  key.clear();
  append_word(key, uint64_t(n.op) | (uint64_t{n.arg_count} << 8));
  append_word(key, pack(n.shape));
  const auto args = graph.args(id);
  const size_t group = repeated_group(graph, args);
  // A shape word never has its top bit set (rows are below 2^31): the group's mark is told apart.
  if (group) append_word(key, (uint64_t{1} << 63) | group);
  for (size_t i = 0; i < (group ? group : args.size()); ++i) {
    const auto [shape, identity] = argument_words(graph, args[i]);
    append_word(key, shape);
    append_word(key, identity);
  }
  if (n.op == Op::lookup) append_word(key, graph.parameter(n.attrs.parameter).uid);
  if (has_flag(n.op, kConstant)) append_word(key, std::bit_cast<uint32_t>(n.attrs.constant));
  if (has_flag(n.op, kRange))
    append_word(key, (uint64_t{uint32_t(n.attrs.begin)} << 32) | uint32_t(n.attrs.end));
  return group;
}

char hex_digit(unsigned v) { return "0123456789abcdef"[v & 15]; }

// A constant attribute as a signature prints it: its exact bits, so 0.1f and 0.10000001f never
// share a signature.
std::string constant_text(float constant) {
  const uint32_t bits = std::bit_cast<uint32_t>(constant);
  std::string s = " constant=0x";
  for (int shift = 28; shift >= 0; shift -= 4) s += hex_digit(bits >> shift);
  return s;
}

// signature() with its arguments' repeated group known (a scan of thousands of arguments).
std::string signature_of_group(const Graph& graph, NodeId id, size_t group) {
  const Node& n = graph.node(id);
  std::string s(op_name(n.op));
  s += '(';
  const auto args = graph.args(id);
  if (group) s += std::to_string(args.size() / group) + " x (";
  bool first = true;
  for (NodeId arg : args.first(group ? group : args.size())) {
    if (!first) s += ", ";
    first = false;
    if (const ParameterInfo* p = shared_parameter(graph, arg)) s += "param:" + p->name + ':';
    if (graph.node(arg).op == Op::call) s += "call:" + graph.cell(graph.node(arg).attrs.index).name + ':';
    s += to_string(argument_shape(graph, arg));
  }
  if (group) s += ')';
  if (n.op == Op::lookup) {
    const ParameterInfo& table = graph.parameter(n.attrs.parameter);
    s += "table:" + table.name + ':' + to_string(table.shape);
  }
  s += ')';
  if (has_flag(n.op, kConstant)) s += constant_text(n.attrs.constant);
  if (has_flag(n.op, kRange))
    s += " rows=[" + std::to_string(n.attrs.begin) + "," + std::to_string(n.attrs.end) + ")";
  s += "->" + to_string(n.shape);
  return s;
}

}  // namespace

std::string signature(const Graph& graph, NodeId id) {
  return signature_of_group(graph, id, repeated_group(graph, graph.args(id)));
}

size_t SignatureTable::Hash::operator()(std::string_view s) const {
  return std::hash<std::string_view>()(s);  // the library's word-at-a-time hash, not a copy of our own
}

TypeId SignatureTable::intern(const Graph& graph, NodeId id) {
  if (has_flag(graph.node(id).op, kLeaf)) return kNoType;
  if (graph.node(id).op == Op::call) {
    const CellBody& cell = graph.cell(graph.node(id).attrs.index);
    if (is_call_batch(graph.node(id))) return intern_call_batch(graph, id);
    return intern_call(graph, cell.key, cell.signature, graph.args(id));
  }
  if (is_node_batch(graph.node(id))) return intern_node_batch(graph, id);
  const size_t group = build_key(graph, id, key_buffer_);
  if (auto it = by_key_.find(std::string_view(key_buffer_)); it != by_key_.end()) return it->second;
  return add_type(signature_of_group(graph, id, group));
}

TypeId SignatureTable::intern_named(std::string_view key, const std::string& name) {
  key_buffer_.assign("\xffnamed:");  // node keys start with an op number, never 0xff
  key_buffer_.append(key);
  if (auto it = by_key_.find(std::string_view(key_buffer_)); it != by_key_.end()) return it->second;
  return add_type(name);
}

TypeId SignatureTable::intern_call(const Graph& graph, std::string_view key, const std::string& name,
                                   std::span<const NodeId> arguments) {
  bool any = false;
  for (NodeId id : arguments) any |= graph.node(id).op == Op::parameter;
  if (!any) return intern_named(key, name);
  std::string with_key(key), with_name = name + " with";
  with_key += " parameters";
  for (size_t i = 0; i < arguments.size(); ++i) {
    const Node& n = graph.node(arguments[i]);
    if (n.op != Op::parameter) continue;
    const ParameterInfo& p = graph.parameter(n.attrs.parameter);
    with_key += " " + std::to_string(i) + ":" + std::to_string(p.uid);
    with_name += " argument " + std::to_string(i + 1) + " = " + p.name;
  }
  return intern_named(with_key, with_name);
}

template <typename Make>
TypeId SignatureTable::recorded_or(std::span<const uint64_t> words, Make&& make) {
  const uint64_t hash = hash_words(words);
  if (const TypeId* seen = find_recorded(words, hash)) return *seen;
  const TypeId type = make();
  remember_recorded(words, hash, type);
  return type;
}

TypeId SignatureTable::intern_call_batch(const Graph& graph, NodeId id) {
  // Batch calls of one cell share a type whatever their sizes and terms (a batch of them runs as
  // the calls of all their members), as calls of the cell do, apart from the plain calls; like
  // those, apart by which parameter a term is (the first member's: a batch's members share them).
  const CellBody& cell = graph.cell(graph.node(id).attrs.index);
  const auto first_member = graph.args(id).first(size_t(call_batch(graph, id).terms_per_member()));
  // Asked once per batch call a backward pass records: the exact cache answers a cell and
  // parameters seen before (the cell by its address, as build_key names a call's cell; bit 61 of
  // the header keeps these keys apart) with no string built.
  uint64_t words[kRecordedWords];
  size_t length = 0;
  words[length++] = uint64_t{1} << 61;
  words[length++] = reinterpret_cast<uintptr_t>(&cell);
  bool fits = true;  // else too many parameters to key: the strings alone
  for (size_t i = 0; i < first_member.size(); ++i) {
    const Node& a = graph.node(first_member[i]);
    if (a.op != Op::parameter) continue;
    fits = length + 2 <= kRecordedWords;
    if (!fits) break;
    words[length++] = i;
    words[length++] = graph.parameter(a.attrs.parameter).uid;
  }
  const auto named = [&] { return intern_call(graph, cell.key + " batch", cell.signature + " batched", first_member); };
  if (!fits) return named();
  return recorded_or(std::span<const uint64_t>(words, length), named);
}

TypeId SignatureTable::intern_node_batch(const Graph& graph, NodeId id) {
  // Batch nodes of one op, member shape, slot shapes, constant and parameters share a type whatever
  // their number of members (a batch of them runs as all their members), apart from plain nodes.
  const Node& n = graph.node(id);
  const NodeBatch batch = node_batch(graph, id);
  // Asked once per batch node a backward pass records: the exact cache answers one seen before
  // (bit 62 of the header keeps these keys apart) with no string built.
  uint64_t words[kRecordedWords];
  size_t length = 0;
  const auto args = graph.args(id);
  const bool fits = 2 + 2 * batch.slots() + 1 <= kRecordedWords;  // else the strings alone
  if (fits) {
    words[length++] = (uint64_t{1} << 62) | uint64_t(n.op) | (uint64_t{batch.slots()} << 8);
    words[length++] = pack(member_shape(n));
    for (size_t slot = 0; slot < batch.slots(); ++slot) {
      const ParameterInfo* p = shared_parameter(graph, args[slot]);
      words[length++] = pack(batch.shapes[slot]);
      words[length++] = p ? (uint64_t{1} << 63) | p->uid : 0;
    }
    if (has_flag(n.op, kConstant)) words[length++] = std::bit_cast<uint32_t>(n.attrs.constant);
  }
  const auto named = [&] { return intern_node_batch_named(graph, n, batch); };
  if (!fits) return named();
  return recorded_or(std::span<const uint64_t>(words, length), named);
}

TypeId SignatureTable::intern_node_batch_named(const Graph& graph, const Node& n, const NodeBatch& batch) {
  const auto args = graph.args(n);
  std::string key = "batch " + std::string(op_name(n.op)) + ' ' + to_string(member_shape(n));
  std::string name = std::string(op_name(n.op)) + " batched(";
  for (size_t slot = 0; slot < batch.slots(); ++slot) {
    const ParameterInfo* p = shared_parameter(graph, args[slot]);
    key += ' ' + to_string(batch.shapes[slot]) + (p ? ':' + std::to_string(p->uid) : std::string());
    name += (slot ? ", " : "") + (p ? "param:" + p->name + ':' : std::string()) + to_string(batch.shapes[slot]);
  }
  name += ')';
  if (has_flag(n.op, kConstant)) {
    key += constant_text(n.attrs.constant);
    name += constant_text(n.attrs.constant);
  }
  name += "->" + to_string(member_shape(n));
  return intern_named(key, name);
}

TypeId SignatureTable::intern_contraction(const Graph& graph, NodeId id, Shape dy, Shape x) {
  const Node& n = graph.node(id);
  // Asked once per weight per backward pass: the exact cache answers a contraction seen before
  // (its header's top bit, which a node's header never sets, keeps it apart) with no string built.
  const uint64_t words[] = {(uint64_t{1} << 63) | uint64_t(n.op) | (uint64_t{n.arg_count} << 8), pack(dy), pack(x),
                            pack(n.shape)};
  return recorded_or(words, [&] { return intern_contraction_named(n, dy, x); });
}

TypeId SignatureTable::intern_contraction_named(const Node& n, Shape dy, Shape x) {
  const std::string pairs = std::to_string(n.arg_count / 2) + " x (" + to_string(dy) + ", " + to_string(x) + ")";
  return intern_named(std::string(op_name(n.op)) + ' ' + pairs + ' ' + to_string(n.shape),
                      std::string(op_name(n.op)) + '(' + pairs + ")->" + to_string(n.shape));
}

TypeId SignatureTable::add_type(std::string name) {
  if (by_name_.count(name)) {
    // Same printed form, different identity (two models that name a parameter alike).
    const std::string base = name;
    for (int n = 2; by_name_.count(name); ++n) name = base + " #" + std::to_string(n);
  }
  const TypeId type = static_cast<TypeId>(names_.size());
  names_.push_back(name);
  type_bytes_ += key_buffer_.size() + sizeof(TypeId) + 2 * sizeof(void*) +  // the key's entry
                 2 * name.size() + sizeof(TypeId) + 2 * sizeof(void*) + sizeof(std::string);  // the name's
  by_name_.emplace(std::move(name), type);
  by_key_.emplace(key_buffer_, type);
  return type;
}

void SignatureTable::assign(const Graph& graph, NodeId begin, std::vector<TypeId>& types) {
  types.resize(graph.size());
  for (NodeId id = begin; id < graph.size(); ++id) types[id] = intern(graph, id);
}

std::vector<TypeId> SignatureTable::assign(const Graph& graph) {
  std::vector<TypeId> types;
  assign(graph, 0, types);
  return types;
}

TypeId SignatureTable::intern_recorded(const Graph& graph, NodeId id, std::span<const TypeId> types) {
  const Node& n = graph.node(id);
  if (has_flag(n.op, kLeaf)) return kNoType;
  if (n.op == Op::call) return intern(graph, id);
  uint64_t words[kRecordedWords];
  size_t length = 0;
  // Header: op and arity; then what the signature adds beyond the arguments' identities.
  words[length++] = uint64_t(n.op) | (uint64_t{n.arg_count} << 8);
  if (n.op == Op::lookup) words[length++] = graph.parameter(n.attrs.parameter).uid;
  if (has_flag(n.op, kConstant)) words[length++] = std::bit_cast<uint32_t>(n.attrs.constant);
  if (has_flag(n.op, kRange)) words[length++] = (uint64_t{uint32_t(n.attrs.begin)} << 32) | uint32_t(n.attrs.end);
  // The arguments' types do not fix these shapes.
  if (n.op == Op::reshape || n.op == Op::matmul_nt_rows || n.op == Op::kmax_pooling) words[length++] = pack(n.shape);
  if (length + n.arg_count > kRecordedWords) return intern(graph, id);
  // An argument is its type (which fixes its shape), a parameter's uid, or an input's shape.
  for (NodeId arg : graph.args(id)) {
    const Node& a = graph.node(arg);
    if (types[arg] != kNoType && types[arg] != kCallOutput) words[length++] = uint64_t{types[arg]};
    else if (a.op == Op::parameter) words[length++] = (uint64_t{1} << 63) | graph.parameter(a.attrs.parameter).uid;
    else words[length++] = (uint64_t{3} << 62) | pack(a.shape);
  }
  return recorded_or(std::span<const uint64_t>(words, length), [&] { return intern(graph, id); });
}

uint64_t SignatureTable::hash_words(std::span<const uint64_t> words) {
  uint64_t hash = 0x9e3779b97f4a7c15ull;
  for (uint64_t w : words) {
    hash = (hash ^ w) * 0xbf58476d1ce4e5b9ull;
    hash ^= hash >> 31;
  }
  return hash | 1;  // never 0, the empty mark
}

const TypeId* SignatureTable::find_recorded(std::span<const uint64_t> words, uint64_t hash) const {
  const size_t mask = recorded_.size() - 1;
  for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
    const RecordedEntry& e = recorded_[slot];
    if (e.hash == 0) return nullptr;
    if (e.hash == hash && e.length == words.size()) {
      size_t i = 0;
      while (i < words.size() && e.words[i] == words[i]) ++i;
      if (i == words.size()) return &e.type;
    }
  }
}

void SignatureTable::remember_recorded(std::span<const uint64_t> words, uint64_t hash, TypeId type) {
  const size_t length = words.size();
  if ((recorded_count_ + 1) * 2 > recorded_.size()) {  // keep the load under one half
    std::vector<RecordedEntry> old(recorded_.size() * 2);
    old.swap(recorded_);
    for (const RecordedEntry& e : old)
      if (e.hash != 0)
        for (size_t slot = e.hash & (recorded_.size() - 1);; slot = (slot + 1) & (recorded_.size() - 1))
          if (recorded_[slot].hash == 0) {
            recorded_[slot] = e;
            break;
          }
  }
  for (size_t slot = hash & (recorded_.size() - 1);; slot = (slot + 1) & (recorded_.size() - 1)) {
    RecordedEntry& e = recorded_[slot];
    if (e.hash != 0) continue;
    e.hash = hash;
    e.length = static_cast<uint32_t>(length);
    e.type = type;
    std::memcpy(e.words, words.data(), length * sizeof(uint64_t));
    ++recorded_count_;
    break;
  }
}

void SignatureTable::reset() {
  ++resets_;
  forgotten_ += int64_t(names_.size());
  by_key_.clear();
  by_name_.clear();
  names_.clear();
  recorded_.assign(256, RecordedEntry{});
  recorded_count_ = 0;
  type_bytes_ = 0;
}

size_t SignatureTable::bytes() const { return recorded_.size() * sizeof(RecordedEntry) + type_bytes_; }

std::optional<TypeId> SignatureTable::find(std::string_view signature) const {
  if (auto it = by_name_.find(signature); it != by_name_.end()) return it->second;
  return std::nullopt;
}

}  // namespace edb::ir
