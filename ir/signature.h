// Batching signatures: the canonical printable string of a node (op, every attribute with floats by
// exact bits, argument shapes, identity of shared operands), interned to dense type ids.
// Two nodes batch together only when their strings are equal; hashing is only for lookup.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/ir.h"

namespace edb::ir {

using TypeId = uint32_t;
inline constexpr TypeId kNoType = ~TypeId{0};  // leaves: never scheduled
// A view of a single-node cell call's output (trace/cell.cpp): never scheduled either; the
// policies see its call in its place, and the driver places it inside the call's frame.
inline constexpr TypeId kCallOutput = kNoType - 1;

// The canonical signature string of one node, e.g.
// "affine(384x1, param:model/U_iou:384x256, 256x1)->384x1".
std::string signature(const Graph& graph, NodeId id);

// Interns signatures to dense ids. Ids are stable until reset() (an engine owns one, and resets it
// only between evaluations, when nothing holds its ids); strings are stable across processes, so
// anything stored on disk keys on the strings.
class SignatureTable {
 public:
  // The type of every node (kNoType for leaves), computed without building strings for nodes
  // whose exact binary key was seen before.
  std::vector<TypeId> assign(const Graph& graph);
  void assign(const Graph& graph, NodeId begin, std::vector<TypeId>& types);
  TypeId intern(const Graph& graph, NodeId id);
  // The record-time path: the type of node `id` from its op, attributes and its arguments' types
  // (`types` holds the types of every earlier node). A small exact cache keyed by those ids
  // answers most nodes without building a key from shapes; a miss goes through intern().
  TypeId intern_recorded(const Graph& graph, NodeId id, std::span<const TypeId> types);

  // A type that is not one node's (a cell call): `key` identifies it exactly, `name` is how it
  // prints. Keys live apart from node keys; two keys that print alike get a " #n" suffix.
  TypeId intern_named(std::string_view key, const std::string& name);
  // A cell call's type on `arguments`: the cell's (`key`, printed as `name`), and where arguments
  // are parameters, which parameter each one is: a batch of calls then reads the same parameters
  // in every call (a compiled cell packs a weight, or reads a shared slot, once for the batch).
  TypeId intern_call(const Graph& graph, std::string_view key, const std::string& name, std::span<const NodeId> arguments);
  // A batch call's type (ir::CallBatch): its cell's, apart from plain calls of the cell.
  TypeId intern_call_batch(const Graph& graph, NodeId id);
  // A batch node's type (ir::NodeBatch): its op, member and slot shapes, parameters and constant,
  // whatever its number of members, apart from plain nodes of its op.
  TypeId intern_node_batch(const Graph& graph, NodeId id);
  // The type of a weight's contraction (matmul_nt, matmul_nt_rows) whose every pair has factors of
  // `dy` and `x`'s shapes, as the backward pass builds them: its op, number of pairs, those shapes
  // and its own, not its arguments one by one (thousands, read nowhere else: a batch of them
  // reads each member's own pairs).
  TypeId intern_contraction(const Graph& graph, NodeId id, Shape dy, Shape x);

  const std::string& name(TypeId type) const { return names_[type]; }
  std::optional<TypeId> find(std::string_view signature) const;
  size_t size() const { return names_.size(); }
  // Forgets every type: ids start again from 0. The caller makes sure no one still holds an id.
  void reset();
  int64_t resets() const { return resets_; }
  int64_t forgotten() const { return forgotten_; }  // types forgotten by reset(), summed
  size_t bytes() const;  // roughly: names, keys and the record-time cache (kept as types are added:
                         // Engine::stats() reads it after every evaluation)

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const;
  };
  // Exact binary key (bytes) -> type. Parameters appear by process-unique uid in the key and by
  // name in the string; two different keys that print alike get a "#n" suffix to stay distinct.
  std::unordered_map<std::string, TypeId, Hash, std::equal_to<>> by_key_;
  std::unordered_map<std::string, TypeId, Hash, std::equal_to<>> by_name_;
  std::vector<std::string> names_;
  std::string key_buffer_;
  TypeId add_type(std::string name);  // a new type for key_buffer_, printed as `name` (made unique)

  // Open-addressing cache for intern_recorded(): fixed-size keys compared word by word.
  static constexpr size_t kRecordedWords = 12;
  struct RecordedEntry {
    uint64_t hash = 0;  // 0 marks an empty slot
    uint32_t length = 0;
    TypeId type = kNoType;
    uint64_t words[kRecordedWords];
  };
  std::vector<RecordedEntry> recorded_ = std::vector<RecordedEntry>(256);
  static uint64_t hash_words(std::span<const uint64_t> words);  // never 0
  const TypeId* find_recorded(std::span<const uint64_t> words, uint64_t hash) const;  // null: not seen
  void remember_recorded(std::span<const uint64_t> words, uint64_t hash, TypeId type);
  // The type the cache holds for `words`, else make()'s (a string path), remembered under them.
  template <typename Make>
  TypeId recorded_or(std::span<const uint64_t> words, Make&& make);
  TypeId intern_contraction_named(const Node& n, Shape dy, Shape x);  // the string paths
  TypeId intern_node_batch_named(const Graph& graph, const Node& n, const NodeBatch& batch);
  size_t recorded_count_ = 0;
  int64_t resets_ = 0, forgotten_ = 0;
  size_t type_bytes_ = 0;  // bytes()'s share of by_key_, by_name_ and names_
};

}  // namespace edb::ir
