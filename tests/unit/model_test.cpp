// Unit tests for Model: seeded initialisation, naming and shape errors, and the model file:
// round trip, every load error (a UsageError naming the path and the problem), no partial loads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <edbatch/edbatch.h>

#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::usage_error;

using edb::testing::add_layout;
using edb::testing::all_values;
using edb::testing::read_file;
using edb::testing::TempDir;
using edb::testing::write_file;

constexpr size_t kHeaderBytes = 8 + 4 + 8 + 8;  // magic, version, body size, checksum

std::vector<float> copy(std::span<const float> v) { return {v.begin(), v.end()}; }

TEST(ModelInit, SeededAndDeterministic) {
  Model a("m", 7), b("m", 7), c("m", 8);
  const Parameter wa = a.add_parameter("W", 4, 5), wb = b.add_parameter("W", 4, 5);
  const Parameter wc = c.add_parameter("W", 4, 5);
  EXPECT_EQ(copy(wa.values()), copy(wb.values()));
  EXPECT_NE(copy(wa.values()), copy(wc.values()));
  // Independent of insertion order and of other parameters.
  Model d("m", 7);
  d.add_parameter("U", 4, 5);
  EXPECT_EQ(copy(d.add_parameter("W", 4, 5).values()), copy(wa.values()));
  EXPECT_NE(copy(d.parameter("U").values()), copy(wa.values()));
  EXPECT_EQ(wa.name(), "W");
  EXPECT_EQ(wa.rows(), 4);
  EXPECT_EQ(wa.cols(), 5);
}

// read() is values() without the span to write through: the same numbers, a write through
// values() seen by it.
TEST(ModelInit, ReadIsTheValuesReadOnly) {
  Model model("read");
  const Parameter w = model.add_parameter("W", 3, 2);
  const std::span<const float> read = w.read();
  ASSERT_EQ(read.size(), 6u);
  const std::vector<float> before(read.begin(), read.end());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), w.values().begin()));
  w.values()[4] = 7.5f;
  EXPECT_EQ(w.read()[4], 7.5f);
}

TEST(ModelInit, GlorotAndLookupRanges) {
  Model model("m", 3);
  const Parameter w = model.add_parameter("W", 60, 40);
  const float limit = std::sqrt(6.0f / 100.0f);
  const auto [low, high] = std::minmax_element(w.values().begin(), w.values().end());
  EXPECT_GE(*low, -limit);
  EXPECT_LE(*high, limit);
  EXPECT_LT(*low, -0.9f * limit);  // 2400 draws cover the range
  EXPECT_GT(*high, 0.9f * limit);
  double mean = 0;
  for (float v : w.values()) mean += v;
  EXPECT_LT(std::fabs(mean / 2400), 0.02);

  const LookupTable e = model.add_lookup("E", 500, 12);
  const float scale = std::sqrt(3.0f / 12.0f);
  ASSERT_EQ(e.values().size(), 6000u);
  const auto [elow, ehigh] = std::minmax_element(e.values().begin(), e.values().end());
  EXPECT_GE(*elow, -scale);
  EXPECT_LE(*ehigh, scale);
  EXPECT_LT(*elow, -0.9f * scale);
  EXPECT_GT(*ehigh, 0.9f * scale);
  EXPECT_EQ(model.parameter_count(), 2u);
  EXPECT_EQ(model.value_count(), 2400 + 6000);
}

TEST(ModelErrors, NamesAndShapes) {
  Model model("m");
  model.add_parameter("W", 2, 2);
  EXPECT_EQ(usage_error([&] { model.add_parameter("W", 3, 3); }),
            "edb::Model::add_parameter(): model 'm' already has a parameter named 'W'");
  EXPECT_EQ(usage_error([&] { model.add_lookup("W", 3, 3); }),
            "edb::Model::add_lookup(): model 'm' already has a parameter named 'W'");
  EXPECT_EQ(usage_error([&] { model.add_parameter("V", 0, 3); }),
            "edb::Model::add_parameter(): 'V' has shape 0x3; both sizes must be positive");
  EXPECT_EQ(usage_error([&] { model.add_parameter("V", 3, -1); }),
            "edb::Model::add_parameter(): 'V' has shape 3x-1; both sizes must be positive");
  EXPECT_EQ(usage_error([&] { model.add_parameter("", 3, 3); }),
            "edb::Model::add_parameter(): the name is empty");
  EXPECT_NE(usage_error([&] { model.add_lookup("E", 0, 4); }), "");
  EXPECT_EQ(usage_error([&] { model.parameter("nosuch"); }),
            "edb::Model::parameter(): model 'm' has no parameter named 'nosuch'");
  EXPECT_EQ(usage_error([&] { model.lookup("W"); }),
            "edb::Model::lookup(): model 'm' has no lookup table named 'W'");
  EXPECT_EQ(usage_error([] { Model bad("a/b"); }),
            "edb::Model(): name 'a/b' must be non-empty and contain no '/'");
  EXPECT_NE(usage_error([] { Model bad(""); }), "");
  EXPECT_EQ(model.parameter_count(), 1u);  // failed adds add nothing
}

class ModelFile : public ::testing::Test {
 protected:
  void SetUp() override {
    add_layout(saved);
    saved.save(path);
    bytes = read_file(path);
    add_layout(target);
    before = all_values(target);
    ASSERT_NE(before, all_values(saved));
  }
  // Loads `contents` into `target` and returns the error; the values must not have changed.
  std::string load_error(const std::string& contents) {
    write_file(bad, contents);
    const std::string error = usage_error([&] { target.load(bad); });
    EXPECT_EQ(all_values(target), before) << "a failed load changed the model";
    return error;
  }

  TempDir dir;
  std::string path = dir.file("model.edb"), bad = dir.file("bad.edb");
  Model saved{"m", 1}, target{"m", 2};
  std::string bytes;
  std::vector<float> before;
};

TEST_F(ModelFile, RoundTrip) {
  EXPECT_EQ(bytes.substr(0, 8), "EDBMODEL");
  EXPECT_EQ(bytes.size(), kHeaderBytes + 4 + (4 + 1 + 1 + 8 + 12 * 4) + (4 + 1 + 1 + 8 + 3 * 4) +
                              (4 + 1 + 1 + 8 + 40 * 4));
  target.load(path);
  EXPECT_EQ(all_values(target), all_values(saved));
  // Loading writes in place, so parameter handles and values() spans stay valid.
  const Parameter w = target.parameter("W");
  const float* data = w.values().data();
  target.load(path);
  EXPECT_EQ(target.parameter("W").values().data(), data);
  // Saving over an existing file replaces it and leaves no temporary behind.
  target.save(path);
  EXPECT_EQ(read_file(path), bytes);
  EXPECT_EQ(testing::leftovers(dir.path()), std::vector<std::string>{});
}

TEST_F(ModelFile, MissingFile) {
  const std::string missing = dir.file("missing.edb");
  EXPECT_EQ(usage_error([&] { target.load(missing); }),
            "edb::Model::load(): '" + missing + "' does not exist");
  EXPECT_EQ(all_values(target), before);
}

TEST_F(ModelFile, BadMagic) {
  std::string file = bytes;
  file[0] = 'X';
  EXPECT_EQ(load_error(file),
            "edb::Model::load(): '" + bad + "' at byte 8: not an edbatch model file (bad magic)");
  EXPECT_EQ(load_error("hello"),
            "edb::Model::load(): '" + bad + "' at byte 0: file ends inside the header (truncated?)");
}

TEST_F(ModelFile, WrongVersion) {
  std::string file = bytes;
  const uint32_t version = 2;
  std::memcpy(file.data() + 8, &version, 4);
  EXPECT_EQ(load_error(file), "edb::Model::load(): '" + bad +
                                  "' at byte 12: format version 2, this build reads version 1");
}

TEST_F(ModelFile, Truncated) {
  const size_t body = bytes.size() - kHeaderBytes;
  EXPECT_EQ(load_error(bytes.substr(0, bytes.size() - 4)),
            "edb::Model::load(): '" + bad + "' at byte 28: body is " + std::to_string(body - 4) +
                " bytes, header says " + std::to_string(body) + " (truncated?)");
  const std::string error = load_error(bytes.substr(0, 20));
  EXPECT_NE(error.find("'" + bad + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("file ends inside the header (truncated?)"), std::string::npos) << error;
  EXPECT_NE(load_error(""), "");
}

TEST_F(ModelFile, FlippedByteFailsTheChecksum) {
  for (size_t at : {kHeaderBytes, kHeaderBytes + 10, bytes.size() - 1}) {
    std::string file = bytes;
    file[at] = char(file[at] ^ 0x40);
    EXPECT_EQ(load_error(file), "edb::Model::load(): '" + bad +
                                    "' at byte 28: checksum mismatch (the file is damaged)")
        << "flipped byte " << at;
  }
}

TEST_F(ModelFile, ShapeMismatchAnywhereChangesNothing) {
  Model other("m", 3);
  other.add_parameter("W", 3, 4);
  other.add_parameter("b", 3, 1);
  other.add_lookup("E", 11, 4);  // the last entry differs, after W and b parsed fine
  const std::vector<float> other_before = copy(other.parameter("W").values());
  const std::string error = usage_error([&] { other.load(path); });
  EXPECT_NE(error.find("edb::Model::load(): '" + path + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("'E' is 4x10 in the file but 4x11 in the model"), std::string::npos) << error;
  EXPECT_EQ(copy(other.parameter("W").values()), other_before);
}

TEST_F(ModelFile, EntryCountMismatch) {
  Model smaller("m", 3);
  smaller.add_parameter("W", 3, 4);
  smaller.add_parameter("b", 3, 1);
  const std::string error = usage_error([&] { smaller.load(path); });
  EXPECT_NE(error.find("'" + path + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("has 3 parameters, model 'm' has 2"), std::string::npos) << error;
}

TEST_F(ModelFile, MissingParameterNameIsAUsageErrorAndChangesNothing) {
  Model renamed("m", 3);
  renamed.add_parameter("W", 3, 4);
  renamed.add_parameter("c", 3, 1);  // the file has "b"
  renamed.add_lookup("E", 10, 4);
  const std::vector<float> w_before = copy(renamed.parameter("W").values());
  const std::string error = usage_error([&] { renamed.load(path); });
  EXPECT_NE(error.find("the file has parameter 'b', which model 'm' lacks"), std::string::npos) << error;
  EXPECT_EQ(copy(renamed.parameter("W").values()), w_before);
}

TEST_F(ModelFile, MissingParameterNameNamesThePath) {
  Model renamed("m", 3);
  renamed.add_parameter("W", 3, 4);
  renamed.add_parameter("c", 3, 1);
  renamed.add_lookup("E", 10, 4);
  const std::string error = usage_error([&] { renamed.load(path); });
  EXPECT_NE(error.find("'" + path + "'"), std::string::npos) << error;
}

TEST_F(ModelFile, BodyErrorsReportFileOffsets) {
  Model smaller("m", 3);
  smaller.add_parameter("W", 3, 4);
  const std::string error = usage_error([&] { smaller.load(path); });
  EXPECT_NE(error.find("at byte 32:"), std::string::npos) << error;
}

TEST_F(ModelFile, KindMismatch) {
  // The file holds "E" as a lookup table; this model has a parameter of that name and shape.
  Model kinds("m", 3);
  kinds.add_parameter("W", 3, 4);
  kinds.add_parameter("b", 3, 1);
  kinds.add_parameter("E", 4, 10);
  const std::vector<float> w_before = copy(kinds.parameter("W").values());
  EXPECT_NE(usage_error([&] { kinds.load(path); }).find("the file has lookup table 'E', which model 'm' lacks"),
            std::string::npos);
  EXPECT_EQ(copy(kinds.parameter("W").values()), w_before);
}

TEST_F(ModelFile, DuplicateEntryLeavesAParameterWithoutValues) {
  Model two("m", 1);
  two.add_parameter("a", 2, 1);
  two.add_parameter("b", 2, 1);
  two.save(path);
  // A body with a valid checksum that names "a" twice and "b" never.
  std::string body = read_file(path).substr(kHeaderBytes);
  const std::string b_entry("\x01\x00\x00\x00" "b", 5);
  const size_t at = body.find(b_entry);
  ASSERT_NE(at, std::string::npos);
  body.replace(at, 5, std::string("\x01\x00\x00\x00" "a", 5));
  write_file(bad, testing::with_binary_body(read_file(path), body));
  Model fresh("m", 2);
  fresh.add_parameter("a", 2, 1);
  fresh.add_parameter("b", 2, 1);
  const std::vector<float> a_before = copy(fresh.parameter("a").values());
  EXPECT_EQ(usage_error([&] { fresh.load(bad); }),
            "edb::Model::load(): '" + bad + "' has no values for 'b'");
  EXPECT_EQ(copy(fresh.parameter("a").values()), a_before);
}

}  // namespace
}  // namespace edb
