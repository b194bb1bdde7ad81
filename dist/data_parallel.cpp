// DataParallel over MPI: the ranks' gradients summed with MPI's nonblocking all-reduce, dense ones in
// place or in buckets, lookup tables over the union of the rows the ranks read. What each rank
// trains on, and when it calls these, is the training loop's business (samples/training.cpp).
#include "edbatch/distributed.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ir/checksum.h"

namespace edb {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// MPI's default handler on MPI_COMM_WORLD ends every rank on an error, so a failed call returns only
// under another handler; this turns that into an exception naming the call.
void check(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw InternalError(std::string("edb::DataParallel: ") + call + " failed: " + std::string(text, size_t(length)));
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string shortened(const std::string& text) { return text.size() <= 200 ? text : text.substr(0, 200) + "..."; }

}  // namespace

struct DataParallel::State {
  Model* model = nullptr;
  DataParallelOptions options;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::vector<Parameter> parameters;
  std::vector<LookupTable> tables;
  ReductionStats stats;

  // One step's reduction, from start() to finish().
  bool started = false;
  Gradients* gradients = nullptr;
  std::vector<int> slot_of_parameter;   // index into gradients->parameters, per model parameter
  std::vector<int> slot_of_table;       // index into gradients->tables, or -1
  std::vector<float> small;             // the packed bucket values: presence counts, the loss, small gradients
  std::vector<size_t> small_offset;     // per parameter: where its gradient lies in `small` (npos: in place)
  std::vector<MPI_Request> dense_requests;
  // Tables: the entry counts, then the entries, then the rows over their union.
  enum class TablePhase { idle, counts, entries, rows, done };
  TablePhase table_phase = TablePhase::idle;
  std::vector<int> entry_counts;        // [table * size + rank]
  std::vector<int64_t> local_entries;   // every table's entries of this rank, one after another
  std::vector<int64_t> all_entries;     // gathered: per rank, every table's entries
  std::vector<int> receive_counts, receive_offsets;
  std::vector<std::vector<int64_t>> unions;  // per table
  std::vector<std::vector<float>> rows;      // per table, its union's rows (swapped into the gradients)
  MPI_Request table_request = MPI_REQUEST_NULL;   // the counts, then the entries
  std::vector<MPI_Request> row_requests;          // the rows, one per table some rank read

  static constexpr size_t npos = size_t(-1);

  void start_tables();
  bool advance_tables(bool wait);
  void finish_tables();
};

bool DataParallel::available() { return true; }

DataParallel::DataParallel(Model& model, DataParallelOptions options) : state_(std::make_unique<State>()) {
  if (options.bucket_bytes == 0) throw UsageError("edb::DataParallel: bucket_bytes must be above 0");
  State& s = *state_;
  s.model = &model;
  s.options = options;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
  }
  check(MPI_Comm_dup(MPI_COMM_WORLD, &s.comm), "MPI_Comm_dup");
  MPI_Comm_rank(s.comm, &s.rank);
  MPI_Comm_size(s.comm, &s.size);
  s.parameters = model.parameters();
  s.tables = model.lookups();
  std::string shapes;
  for (const Parameter& p : s.parameters)
    shapes += p.name() + " " + std::to_string(p.rows()) + "x" + std::to_string(p.cols()) + "; ";
  for (const LookupTable& t : s.tables)
    shapes += t.name() + " " + std::to_string(t.entries()) + "x" + std::to_string(t.dim()) + "; ";
  check_same("the model's parameters (names and shapes)", model.name() + ": " + shapes);
}

DataParallel::~DataParallel() {
  if (!state_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A step started and never finished (an exception in between) still owns MPI's requests.
  for (MPI_Request& r : state_->dense_requests)
    if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
  if (state_->table_request != MPI_REQUEST_NULL) MPI_Wait(&state_->table_request, MPI_STATUS_IGNORE);
  for (MPI_Request& r : state_->row_requests)
    if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
  if (state_->comm != MPI_COMM_NULL) MPI_Comm_free(&state_->comm);
}

int DataParallel::rank() const { return state_->rank; }
int DataParallel::size() const { return state_->size; }
const ReductionStats& DataParallel::stats() const { return state_->stats; }

std::pair<size_t, size_t> DataParallel::share(size_t begin, size_t end) const {
  if (end < begin) throw UsageError("edb::DataParallel::share: end " + std::to_string(end) + " is before begin " + std::to_string(begin));
  const size_t n = end - begin, r = size_t(state_->rank), p = size_t(state_->size);
  return {begin + n * r / p, begin + n * (r + 1) / p};
}

void DataParallel::check_same(const std::string& what, const std::string& value) {
  const State& s = *state_;
  const uint64_t mine = ir::checksum(value);
  std::vector<uint64_t> all(size_t(s.size));
  check(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, s.comm), "MPI_Allgather");
  int differing = -1;
  for (int r = 1; r < s.size && differing < 0; ++r)
    if (all[size_t(r)] != all[0]) differing = r;
  // Rank 0's text, for the message on every rank.
  int length = int(value.size());
  check(MPI_Bcast(&length, 1, MPI_INT, 0, s.comm), "MPI_Bcast");
  std::string first = s.rank == 0 ? value : std::string(size_t(length), '\0');
  check(MPI_Bcast(first.data(), length, MPI_CHAR, 0, s.comm), "MPI_Bcast");
  if (differing < 0) return;
  int other_length = differing == s.rank ? int(value.size()) : 0;
  check(MPI_Bcast(&other_length, 1, MPI_INT, differing, s.comm), "MPI_Bcast");
  std::string other = differing == s.rank ? value : std::string(size_t(other_length), '\0');
  check(MPI_Bcast(other.data(), other_length, MPI_CHAR, differing, s.comm), "MPI_Bcast");
  throw UsageError("edb::DataParallel: " + what + " differ between ranks: rank " + std::to_string(differing) +
                   " has '" + shortened(other) + "', rank 0 '" + shortened(first) + "'");
}

void DataParallel::check_weights(const std::string& when) {
  const State& s = *state_;
  ir::Checksum sum;
  for (const Parameter& p : s.parameters) sum.add(p.read().data(), p.read().size() * sizeof(float));
  for (const LookupTable& t : s.tables) sum.add(t.values().data(), t.values().size() * sizeof(float));
  char text[64];
  std::snprintf(text, sizeof text, "checksum %016llx", static_cast<unsigned long long>(sum.value()));
  check_same("the model's values " + when, text);
}

void DataParallel::start(Gradients& gradients) {
  State& s = *state_;
  if (s.started) throw UsageError("edb::DataParallel::start: the last step's reduction was not finished (call finish)");
  const auto begin = Clock::now();
  s.gradients = &gradients;
  s.started = true;
  const size_t parameter_count = s.parameters.size();
  // Which gradient belongs to which parameter; a parameter without one on this rank gets a zero
  // gradient, since every rank must hand MPI the same buffers in the same order.
  s.slot_of_parameter.assign(parameter_count, -1);
  for (size_t i = 0; i < gradients.parameters.size(); ++i) {
    const Parameter& p = gradients.parameters[i].parameter;
    const auto found = std::find(s.parameters.begin(), s.parameters.end(), p);
    if (found == s.parameters.end())
      throw UsageError("edb::DataParallel::start: a gradient of '" + p.name() + "', which is not a parameter of model '" +
                       s.model->name() + "'");
    s.slot_of_parameter[size_t(found - s.parameters.begin())] = int(i);
  }
  std::vector<bool> present(parameter_count);
  for (size_t k = 0; k < parameter_count; ++k) {
    present[k] = s.slot_of_parameter[k] >= 0;
    if (present[k]) continue;
    const Parameter& p = s.parameters[k];
    s.slot_of_parameter[k] = int(gradients.parameters.size());
    gradients.parameters.push_back({p, Tensor{p.rows(), p.cols(), std::vector<float>(size_t(p.rows()) * size_t(p.cols()), 0.0f)}});
  }
  // The small bucket: presence counts, the loss, then every gradient below bucket_bytes.
  s.small.clear();
  for (size_t k = 0; k < parameter_count; ++k) s.small.push_back(present[k] ? 1.0f : 0.0f);
  s.small.push_back(gradients.loss);
  s.small_offset.assign(parameter_count, State::npos);
  s.dense_requests.clear();
  int64_t values = 0;
  for (size_t k = 0; k < parameter_count; ++k) {
    std::vector<float>& g = gradients.parameters[size_t(s.slot_of_parameter[k])].gradient.data;
    values += int64_t(g.size());
    if (g.size() * sizeof(float) >= s.options.bucket_bytes) {
      MPI_Request& r = s.dense_requests.emplace_back(MPI_REQUEST_NULL);
      check(MPI_Iallreduce(MPI_IN_PLACE, g.data(), int(g.size()), MPI_FLOAT, MPI_SUM, s.comm, &r), "MPI_Iallreduce");
    } else {
      s.small_offset[k] = s.small.size();
      s.small.insert(s.small.end(), g.begin(), g.end());
    }
  }
  // The packed values in buckets of about bucket_bytes (all of them are known now, so they go at once).
  const size_t bucket = std::max<size_t>(1, s.options.bucket_bytes / sizeof(float));
  for (size_t first = 0; first < s.small.size(); first += bucket) {
    MPI_Request& r = s.dense_requests.emplace_back(MPI_REQUEST_NULL);
    check(MPI_Iallreduce(MPI_IN_PLACE, s.small.data() + first, int(std::min(bucket, s.small.size() - first)), MPI_FLOAT,
                         MPI_SUM, s.comm, &r),
          "MPI_Iallreduce");
  }
  s.stats.bytes += (values + int64_t(parameter_count) + 1) * int64_t(sizeof(float));
  s.start_tables();
  s.stats.start_ms += ms_since(begin);
}

// Tables in three collectives, each started when the last completes: the entry counts
// (MPI_Iallgather), the entries (MPI_Iallgatherv), then the rows over the union (MPI_Iallreduce).
void DataParallel::State::start_tables() {
  table_phase = TablePhase::done;
  if (tables.empty()) return;
  slot_of_table.assign(tables.size(), -1);
  for (size_t i = 0; i < gradients->tables.size(); ++i) {
    const LookupTable& t = gradients->tables[i].table;
    const auto found = std::find(tables.begin(), tables.end(), t);
    if (found == tables.end())
      throw UsageError("edb::DataParallel::start: a gradient of lookup table '" + t.name() +
                       "', which is not a table of model '" + model->name() + "'");
    slot_of_table[size_t(found - tables.begin())] = int(i);
  }
  std::vector<int> mine(tables.size(), 0);
  local_entries.clear();
  for (size_t t = 0; t < tables.size(); ++t) {
    if (slot_of_table[t] < 0) continue;
    const std::vector<int64_t>& entries = gradients->tables[size_t(slot_of_table[t])].entries;
    mine[t] = int(entries.size());
    local_entries.insert(local_entries.end(), entries.begin(), entries.end());
  }
  entry_counts.assign(tables.size() * size_t(size), 0);
  // Gathered as [rank][table]; the buffer of the send must live until the request completes.
  receive_counts = mine;  // reused below as the send buffer of this phase
  check(MPI_Iallgather(receive_counts.data(), int(tables.size()), MPI_INT, entry_counts.data(), int(tables.size()), MPI_INT,
                       comm, &table_request),
        "MPI_Iallgather");
  table_phase = TablePhase::counts;
}

// Moves the tables' collectives on; with `wait`, until they are done. Returns whether they are.
bool DataParallel::State::advance_tables(bool wait) {
  for (;;) {
    if (table_phase == TablePhase::done || table_phase == TablePhase::idle) return true;
    int complete = 0;
    if (table_phase == TablePhase::rows) {
      if (wait) check(MPI_Waitall(int(row_requests.size()), row_requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      else check(MPI_Testall(int(row_requests.size()), row_requests.data(), &complete, MPI_STATUSES_IGNORE), "MPI_Testall");
    } else if (wait) {
      check(MPI_Wait(&table_request, MPI_STATUS_IGNORE), "MPI_Wait");
    } else {
      check(MPI_Test(&table_request, &complete, MPI_STATUS_IGNORE), "MPI_Test");
    }
    if (!wait && !complete) return false;
    const size_t table_count = tables.size();
    if (table_phase == TablePhase::counts) {
      receive_counts.assign(size_t(size), 0);
      receive_offsets.assign(size_t(size), 0);
      int total = 0;
      for (int r = 0; r < size; ++r) {
        int count = 0;
        for (size_t t = 0; t < table_count; ++t) count += entry_counts[size_t(r) * table_count + t];
        receive_counts[size_t(r)] = count;
        receive_offsets[size_t(r)] = total;
        total += count;
      }
      all_entries.assign(size_t(total), 0);
      check(MPI_Iallgatherv(local_entries.data(), int(local_entries.size()), MPI_INT64_T, all_entries.data(),
                            receive_counts.data(), receive_offsets.data(), MPI_INT64_T, comm, &table_request),
            "MPI_Iallgatherv");
      stats.bytes += int64_t(local_entries.size() * sizeof(int64_t));
      table_phase = TablePhase::entries;
      continue;
    }
    if (table_phase == TablePhase::entries) {
      // Each table's union of entries, ascending; this rank's rows at their places, zeros elsewhere.
      unions.assign(table_count, {});
      std::vector<size_t> cursor(receive_offsets.begin(), receive_offsets.end());
      for (int r = 0; r < size; ++r)
        for (size_t t = 0; t < table_count; ++t) {
          const int count = entry_counts[size_t(r) * table_count + t];
          const size_t at = cursor[size_t(r)];
          unions[t].insert(unions[t].end(), all_entries.begin() + ptrdiff_t(at), all_entries.begin() + ptrdiff_t(at) + count);
          cursor[size_t(r)] += size_t(count);
        }
      rows.resize(table_count);
      row_requests.clear();
      for (size_t t = 0; t < table_count; ++t) {
        std::sort(unions[t].begin(), unions[t].end());
        unions[t].erase(std::unique(unions[t].begin(), unions[t].end()), unions[t].end());
        const size_t dim = size_t(tables[t].dim());
        rows[t].assign(unions[t].size() * dim, 0.0f);
        if (unions[t].empty()) continue;
        if (slot_of_table[t] >= 0) {
          const Gradients::Rows& mine = gradients->tables[size_t(slot_of_table[t])];
          size_t u = 0;
          for (size_t i = 0; i < mine.entries.size(); ++i) {
            while (unions[t][u] != mine.entries[i]) ++u;
            std::memcpy(rows[t].data() + u * dim, mine.gradients.data() + i * dim, dim * sizeof(float));
          }
        }
        MPI_Request& r = row_requests.emplace_back(MPI_REQUEST_NULL);
        check(MPI_Iallreduce(MPI_IN_PLACE, rows[t].data(), int(rows[t].size()), MPI_FLOAT, MPI_SUM, comm, &r),
              "MPI_Iallreduce");
        stats.bytes += int64_t(rows[t].size() * sizeof(float));
      }
      table_phase = TablePhase::rows;
      continue;
    }
    table_phase = TablePhase::done;  // the rows are summed
  }
}

void DataParallel::State::finish_tables() {
  if (tables.empty()) return;
  // Every table some rank read gets the union's rows, swapped in (its old storage holds the next
  // step's rows); a table no rank read stays out.
  for (size_t t = 0; t < tables.size(); ++t) {
    if (unions[t].empty()) continue;
    if (slot_of_table[t] < 0) {
      slot_of_table[t] = int(gradients->tables.size());
      gradients->tables.push_back({tables[t], {}, {}});
    }
    Gradients::Rows& out = gradients->tables[size_t(slot_of_table[t])];
    out.entries.swap(unions[t]);
    out.gradients.swap(rows[t]);
  }
  std::erase_if(gradients->tables, [](const Gradients::Rows& r) { return r.entries.empty(); });
}

void DataParallel::progress() {
  State& s = *state_;
  if (!s.started) return;
  for (MPI_Request& r : s.dense_requests) {
    if (r == MPI_REQUEST_NULL) continue;
    int complete = 0;
    check(MPI_Test(&r, &complete, MPI_STATUS_IGNORE), "MPI_Test");
  }
  s.advance_tables(false);
}

void DataParallel::finish(Gradients& gradients) {
  State& s = *state_;
  if (!s.started) throw UsageError("edb::DataParallel::finish: no reduction was started (call start first)");
  if (&gradients != s.gradients)
    throw UsageError("edb::DataParallel::finish: not the Gradients given to start()");
  const auto begin = Clock::now();
  s.started = false;
  check(MPI_Waitall(int(s.dense_requests.size()), s.dense_requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  s.advance_tables(true);
  const size_t parameter_count = s.parameters.size();
  gradients.loss = s.small[parameter_count];
  for (size_t k = 0; k < parameter_count; ++k) {
    if (s.small_offset[k] == State::npos) continue;
    std::vector<float>& g = gradients.parameters[size_t(s.slot_of_parameter[k])].gradient.data;
    std::copy_n(s.small.begin() + ptrdiff_t(s.small_offset[k]), g.size(), g.begin());
  }
  // A parameter that no rank's loss depended on leaves the gradients, as in one process.
  std::vector<bool> keep(gradients.parameters.size(), true);
  for (size_t k = 0; k < parameter_count; ++k)
    if (s.small[k] == 0.0f) keep[size_t(s.slot_of_parameter[k])] = false;
  size_t kept = 0;
  for (size_t i = 0; i < gradients.parameters.size(); ++i)
    if (keep[i]) {
      if (kept != i) gradients.parameters[kept] = std::move(gradients.parameters[i]);
      ++kept;
    }
  gradients.parameters.resize(kept);
  s.finish_tables();
  ++s.stats.steps;
  s.stats.wait_ms += ms_since(begin);
}

void DataParallel::abort(const std::string& program, const std::string& message, int status) {
  std::fprintf(stderr, "%s: rank %d of %d: %s\n", program.c_str(), state_->rank, state_->size, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

}  // namespace edb
