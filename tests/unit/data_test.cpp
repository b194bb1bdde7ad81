// Unit tests for samples/data: round trips, the shared bench files, exact error positions,
// generator determinism and statistics, Vocabulary.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include <edbatch/errors.h>

#include "samples/data/data.h"
#include "samples/models.h"
#include "tests/support/test_support.h"

#ifndef EDB_SOURCE_DIR
#define EDB_SOURCE_DIR "."
#endif

namespace edb::samples {
namespace {

std::string shared_data_file(const std::string& file) {
  const char* dir = std::getenv("EDB_SHARED_DATA_DIR");
  return (dir ? std::string(dir) : std::string(EDB_SOURCE_DIR) + "/../shared/data") + "/" + file;
}

std::string file_contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

template <typename Item, typename Write>
std::string write_all(const std::vector<Item>& items, Write write) {
  std::ostringstream out;
  for (const Item& item : items) write(out, item);
  return out.str();
}

// The UsageError message that parsing `text` raises, or "" when it parses.
template <typename Parse>
std::string parse_error(Parse parse, const std::string& text, const std::string& name) {
  std::istringstream in(text);
  try {
    parse(in, name);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "";
}

std::string tree_error(const std::string& text) { return parse_error(parse_trees, text, "t.txt"); }
std::string tagged_error(const std::string& text) { return parse_error(parse_tagged, text, "p.txt"); }
std::string lattice_error(const std::string& text) {
  return parse_error(parse_lattices, text, "l.jsonl");
}

TEST(SampleTrees, ParsesPostOrder) {
  std::istringstream in("(3 (2 w17) (4 (2 w5) (1 w902)))\n");
  std::vector<Tree> trees = parse_trees(in, "t.txt");
  ASSERT_EQ(trees.size(), 1u);
  const Tree& tree = trees[0];
  ASSERT_EQ(tree.nodes.size(), 5u);
  EXPECT_EQ(tree.nodes[0], (TreeNode{2, -1, -1, "w17"}));
  EXPECT_EQ(tree.nodes[1], (TreeNode{2, -1, -1, "w5"}));
  EXPECT_EQ(tree.nodes[2], (TreeNode{1, -1, -1, "w902"}));
  EXPECT_EQ(tree.nodes[3], (TreeNode{4, 1, 2, ""}));
  EXPECT_EQ(tree.nodes[4], (TreeNode{3, 0, 3, ""}));
  EXPECT_EQ(&tree.root(), &tree.nodes[4]);
  EXPECT_EQ(tree.leaf_count(), 3);
  EXPECT_EQ(tree_depth(tree), 3);
  std::ostringstream out;
  write_tree(out, tree);
  EXPECT_EQ(out.str(), "(3 (2 w17) (4 (2 w5) (1 w902)))\n");
}

TEST(SampleTrees, SkipsEmptyLinesAndAcceptsSingleWordTrees) {
  std::istringstream in("\n(1 w1)\r\n   \n(0 (1 a) (2 b))\n");
  std::vector<Tree> trees = parse_trees(in, "t.txt");
  ASSERT_EQ(trees.size(), 2u);
  EXPECT_EQ(trees[0].nodes.size(), 1u);
  EXPECT_TRUE(trees[0].root().is_leaf());
  EXPECT_EQ(trees[0].root().word, "w1");
  EXPECT_EQ(trees[1].leaf_count(), 2);
}

TEST(SampleTrees, RoundTripsGenerated) {
  std::vector<Tree> trees = generate_trees(300, 11);
  std::string text = write_all(trees, write_tree);
  std::istringstream in(text);
  std::vector<Tree> parsed = parse_trees(in, "generated");
  EXPECT_EQ(parsed, trees);
  EXPECT_EQ(write_all(parsed, write_tree), text);
}

TEST(SampleTrees, ReportsMalformedLines) {
  EXPECT_EQ(tree_error("(2 (1 a))"), "t.txt:1:9: expected '(' starting the second subtree, found ')'");
  EXPECT_EQ(tree_error("(2 (1 a) (1 b) (1 c))"),
            "t.txt:1:16: expected ')' after two subtrees, found '('");
  EXPECT_EQ(tree_error("(7 a)"), "t.txt:1:2: expected label 0-4, found '7'");
  EXPECT_EQ(tree_error("(2 (5 a) (1 b))"), "t.txt:1:5: expected label 0-4, found '5'");
  EXPECT_EQ(tree_error("(12 a)"), "t.txt:1:2: expected label 0-4, found '12'");
  EXPECT_EQ(tree_error("(2 a) x"), "t.txt:1:7: expected end of line after tree, found 'x'");
  EXPECT_EQ(tree_error("(2 (1 a) (1 b)"),
            "t.txt:1:15: expected ')' after two subtrees, found end of line");
  EXPECT_EQ(tree_error("(2 )"), "t.txt:1:4: expected word or '(', found ')'");
  EXPECT_EQ(tree_error("(2 a b)"), "t.txt:1:6: expected ')' after word, found 'b'");
  EXPECT_EQ(tree_error("2 a"), "t.txt:1:1: expected '(' starting a tree, found '2'");
  EXPECT_EQ(tree_error("(1 a)\n\n(2 (1 a) (3 b))\n(2 (1 a)(3 b)))"),
            "t.txt:4:15: expected end of line after tree, found ')'");
}

TEST(SampleTrees, ReadReportsPathAndReason) {
  try {
    read_trees("/nonexistent/edb/trees.txt");
    FAIL() << "expected a UsageError";
  } catch (const UsageError& error) {
    EXPECT_STREQ(error.what(),
                 "edb::samples::read_trees(): cannot open '/nonexistent/edb/trees.txt': "
                 "No such file or directory");
  }
  std::string path = (std::filesystem::temp_directory_path() /
                      ("edb_data_test_" + std::to_string(::getpid()) + ".txt")).string();
  std::ofstream(path) << "(1 a)\n(1 a (2 b))\n";
  try {
    read_trees(path);
    FAIL() << "expected a UsageError";
  } catch (const UsageError& error) {
    EXPECT_EQ(std::string(error.what()), path + ":2:6: expected ')' after word, found '('");
  }
  std::remove(path.c_str());
}

TEST(SampleTrees, WriteRejectsWhatCannotBeParsedBack) {
  Tree tree;
  tree.nodes.push_back({2, -1, -1, "two words"});
  std::ostringstream out;
  EXPECT_THROW(write_tree(out, tree), UsageError);
  EXPECT_THROW(write_tree(out, Tree{}), UsageError);
  EXPECT_THROW(Tree{}.root(), UsageError);
  EXPECT_EQ(out.str(), "");
}

TEST(SampleTagged, ParsesAndRoundTrips) {
  std::istringstream in("w1|T1 w2|T2\n\nx|y\n");
  std::vector<TaggedSentence> sentences = parse_tagged(in, "p.txt");
  ASSERT_EQ(sentences.size(), 2u);
  EXPECT_EQ(sentences[0].words, (std::vector<std::string>{"w1", "w2"}));
  EXPECT_EQ(sentences[0].tags, (std::vector<std::string>{"T1", "T2"}));
  EXPECT_EQ(sentences[1].words, (std::vector<std::string>{"x"}));

  std::vector<TaggedSentence> generated = generate_tagged(300, 5);
  std::string text = write_all(generated, write_tagged);
  std::istringstream again(text);
  EXPECT_EQ(parse_tagged(again, "generated"), generated);
}

TEST(SampleTagged, ReportsMalformedLines) {
  EXPECT_EQ(tagged_error("w1|T1  w2|T2"), "p.txt:1:7: expected word|tag token, found ' '");
  EXPECT_EQ(tagged_error("w1|T1 w2"), "p.txt:1:7: expected word|tag token, found 'w2'");
  EXPECT_EQ(tagged_error("|T1"), "p.txt:1:1: expected word before '|', found '|'");
  EXPECT_EQ(tagged_error("a|b w1|"), "p.txt:1:8: expected tag after '|', found end of line");
  EXPECT_EQ(tagged_error("w1|T1|x"), "p.txt:1:6: expected ' ' or end of line after tag, found '|'");
  EXPECT_EQ(tagged_error("w1|T1 "), "p.txt:1:7: expected word|tag token, found end of line");
  EXPECT_EQ(tagged_error("a|b\n\n a|b"), "p.txt:3:1: expected word|tag token, found ' '");
  std::ostringstream out;
  EXPECT_THROW(write_tagged(out, TaggedSentence{{"a", "b"}, {"T1"}}), UsageError);
  EXPECT_THROW(write_tagged(out, TaggedSentence{{"a|b"}, {"T1"}}), UsageError);
}

TEST(SampleLattices, ParsesAndRoundTrips) {
  std::istringstream in(R"({"chars":["a","b","c"],"words":[[0,2,"abc"]],"labels":["B","I","E"]})");
  std::vector<Lattice> lattices = parse_lattices(in, "l.jsonl");
  ASSERT_EQ(lattices.size(), 1u);
  EXPECT_EQ(lattices[0].chars, (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(lattices[0].words.size(), 1u);
  EXPECT_EQ(lattices[0].words[0], (LatticeArc{0, 2, "abc"}));
  EXPECT_EQ(lattices[0].labels, (std::vector<std::string>{"B", "I", "E"}));

  std::vector<Lattice> generated = generate_lattices(200, 9);
  std::string text = write_all(generated, write_lattice);
  std::istringstream again(text);
  EXPECT_EQ(parse_lattices(again, "generated"), generated);
}

TEST(SampleLattices, ReportsMalformedLines) {
  const std::string two_chars = R"({"chars":["a","b"],)";  // 19 bytes
  EXPECT_EQ(lattice_error(R"({"chars":tru})"), "l.jsonl:1:13: expected valid JSON (invalid literal), found '}'");
  EXPECT_EQ(lattice_error(R"({"chars":1e999})"),
            "l.jsonl:1:10: expected a number that fits a double, found number overflow parsing '1e999'");
  EXPECT_EQ(lattice_error("{x"), "l.jsonl:1:2: expected string literal, found 'x'");
  EXPECT_EQ(lattice_error("[1,2"), "l.jsonl:1:5: expected ']', found end of line");
  EXPECT_EQ(lattice_error("[1]"), "l.jsonl:1:1: expected JSON object, found array");
  EXPECT_EQ(lattice_error(two_chars + R"("words":[[0,1,"ab"]]})"),
            "l.jsonl:1:40: expected field \"labels\", found end of object");
  EXPECT_EQ(lattice_error(R"({"chars":["a", 3],"words":[],"labels":[]})"),
            "l.jsonl:1:16: expected string in \"chars\", found 3");
  EXPECT_EQ(lattice_error(R"({"chars":{},"words":[],"labels":[]})"),
            "l.jsonl:1:10: expected array of strings for \"chars\", found object");
  EXPECT_EQ(lattice_error(two_chars + R"( "words": [[0,1,"ab"], [1, 1, "b"]],"labels":["x","y"]})"),
            "l.jsonl:1:47: expected arc end > start 1, found 1");
  EXPECT_EQ(lattice_error(two_chars + R"("words":[[0,2,"ab"]],"labels":["x","y"]})"),
            "l.jsonl:1:32: expected arc end < 2 (the number of chars), found 2");
  EXPECT_EQ(lattice_error(two_chars + R"("words":[[-1,1,"ab"]],"labels":["x","y"]})"),
            "l.jsonl:1:30: expected arc start in 0..1, found -1");
  EXPECT_EQ(lattice_error(two_chars + R"("words":[[0,1.5,"ab"]],"labels":["x","y"]})"),
            "l.jsonl:1:32: expected integer arc end, found 1.5");
  EXPECT_EQ(lattice_error(two_chars + R"("words":[[0,1]],"labels":["x","y"]})"),
            "l.jsonl:1:29: expected arc [start, end, word], found array of 2 elements");
  EXPECT_EQ(lattice_error(two_chars + R"("words":[[0,1,7]],"labels":["x","y"]})"),
            "l.jsonl:1:34: expected string arc word, found 7");
  EXPECT_EQ(lattice_error(two_chars + R"("words":[],"labels":["x"]})"),
            "l.jsonl:1:40: expected 2 labels (one per char), found 1");
  EXPECT_EQ(lattice_error(two_chars + R"("words":[],"labels":["x","y"]} x)"),
            "l.jsonl:1:51: expected end of input, found 'x'");
  EXPECT_EQ(lattice_error("\n" + two_chars + R"("words":[],"labels":["x","y"]})" + "\n[]"),
            "l.jsonl:3:1: expected JSON object, found array");
}

TEST(SampleSharedData, ParsesAndRewritesBenchFilesExactly) {
  struct Case {
    std::string file;
    size_t count;
  };
  int found = 0;
  for (const Case& c : {Case{"sst-like.txt", 2000}, Case{"pos-like.txt", 2000},
                        Case{"lattice-like.jsonl", 1000}}) {
    const std::string path = shared_data_file(c.file);
    if (!std::filesystem::exists(path)) continue;
    ++found;
    SCOPED_TRACE(path);
    std::string rewritten;
    if (c.file == "sst-like.txt") {
      std::vector<Tree> trees = read_trees(path);
      ASSERT_EQ(trees.size(), c.count);
      rewritten = write_all(trees, write_tree);
    } else if (c.file == "pos-like.txt") {
      std::vector<TaggedSentence> sentences = read_tagged(path);
      ASSERT_EQ(sentences.size(), c.count);
      rewritten = write_all(sentences, write_tagged);
    } else {
      std::vector<Lattice> lattices = read_lattices(path);
      ASSERT_EQ(lattices.size(), c.count);
      double arcs = 0;
      for (const Lattice& lattice : lattices) arcs += static_cast<double>(lattice.words.size());
      EXPECT_NEAR(arcs / static_cast<double>(c.count), 15.8, 1.0);
      rewritten = write_all(lattices, write_lattice);
    }
    EXPECT_EQ(rewritten, file_contents(path));  // the writers emit the generators' exact format
  }
  if (found == 0) GTEST_SKIP() << "no bench data at " << shared_data_file("");
}

// The char tagger's sentences: the same sentences and tags as generate_tagged's for a seed, words
// spelled in lowercase letters (a stem of 2-5 and an ending of 1-3), and each frequent word type
// carrying one tag most of the time, so that a tagger can learn the task.
TEST(SampleGenerators, SpelledSentencesAreTheTaggedOnesSpelledInLetters) {
  const std::vector<TaggedSentence> spelled = generate_spelled_tagged(400, 7), plain = generate_tagged(400, 7);
  EXPECT_EQ(spelled, generate_spelled_tagged(400, 7));
  EXPECT_NE(spelled, generate_spelled_tagged(400, 8));
  EXPECT_THROW(generate_spelled_tagged(-1, 1), UsageError);
  ASSERT_EQ(spelled.size(), plain.size());
  std::map<std::string, std::map<std::string, int>> tags_of;
  for (size_t i = 0; i < spelled.size(); ++i) {
    ASSERT_EQ(spelled[i].words.size(), plain[i].words.size()) << "sentence " << i;
    EXPECT_EQ(spelled[i].tags, plain[i].tags) << "sentence " << i;
    for (size_t w = 0; w < spelled[i].words.size(); ++w) {
      const std::string& word = spelled[i].words[w];
      ASSERT_GE(word.size(), 3u) << word;
      for (char c : word) ASSERT_TRUE(c >= 'a' && c <= 'z') << word;
      ++tags_of[word][spelled[i].tags[w]];
    }
  }
  int frequent = 0, mostly_one_tag = 0;
  for (const auto& [word, tags] : tags_of) {
    int total = 0, top = 0;
    for (const auto& [tag, count] : tags) {
      total += count;
      top = std::max(top, count);
    }
    if (total < 20) continue;
    ++frequent;
    mostly_one_tag += top * 10 >= total * 7;
  }
  EXPECT_GT(frequent, 20);
  EXPECT_GE(mostly_one_tag * 10, frequent * 9);
}

TEST(SampleGenerators, AreDeterministicPerSeed) {
  EXPECT_EQ(generate_trees(50, 7), generate_trees(50, 7));
  EXPECT_NE(generate_trees(50, 7), generate_trees(50, 8));
  EXPECT_EQ(generate_tagged(50, 7), generate_tagged(50, 7));
  EXPECT_NE(generate_tagged(50, 7), generate_tagged(50, 8));
  EXPECT_EQ(generate_lattices(50, 7), generate_lattices(50, 7));
  EXPECT_NE(generate_lattices(50, 7), generate_lattices(50, 8));
  EXPECT_TRUE(generate_trees(0, 1).empty());
  EXPECT_THROW(generate_trees(-1, 1), UsageError);

  // Pinned output: a change here changes every benchmark's input.
  std::vector<Tree> trees = generate_trees(1, 42);
  EXPECT_EQ(trees[0].leaf_count(), 24);
  EXPECT_EQ(write_all(trees, write_tree).substr(0, 40), "(0 (2 w187) (1 (2 (3 (2 (2 (2 w524) (2 (");
  std::ostringstream tagged;
  write_tagged(tagged, generate_tagged(1, 42)[0]);
  EXPECT_EQ(tagged.str(),
            "w0|T13 w549|T30 w3|T0 w707|T8 w3|T0 w0|T13 w143|T10 w6|T6 w7|T2 w7|T2 w713|T0 "
            "w524|T1 w4|T26 w3936|T0 w163|T3 w1204|T3 w3396|T27\n");
  Lattice lattice = generate_lattices(1, 42)[0];
  EXPECT_EQ(lattice.chars.size(), 39u);
  EXPECT_EQ(lattice.words.size(), 16u);
  EXPECT_EQ(lattice.words[0], (LatticeArc{2, 4, "c1c1307c0"}));
}

TEST(SampleGenerators, TreesLookLikeSst) {
  std::vector<Tree> trees = generate_trees(2000, 3);
  double length = 0, depth = 0;
  int shortest = 1000, longest = 0;
  std::map<int, int> labels;
  for (const Tree& tree : trees) {
    const int leaves = tree.leaf_count();
    ASSERT_EQ(tree.nodes.size(), static_cast<size_t>(2 * leaves - 1));
    length += leaves;
    depth += tree_depth(tree);
    shortest = std::min(shortest, leaves);
    longest = std::max(longest, leaves);
    for (const TreeNode& node : tree.nodes) ++labels[node.label];
  }
  length /= static_cast<double>(trees.size());
  depth /= static_cast<double>(trees.size());
  EXPECT_GE(length, 15.0);
  EXPECT_LE(length, 23.0);
  EXPECT_NEAR(depth, 10.8, 1.2);  // SST train: 10.8; uniform splits would give about 7
  EXPECT_GE(shortest, 2);
  EXPECT_LE(longest, 55);
  EXPECT_EQ(labels.size(), 5u);
  EXPECT_GT(labels[2], labels[1] + labels[3]);  // neutral dominates, as in SST
}

TEST(SampleGenerators, TaggedAndLatticesLookLikeTheScripts) {
  std::vector<TaggedSentence> sentences = generate_tagged(2000, 3);
  double length = 0;
  std::map<std::string, int> tags_of_w0;
  for (const TaggedSentence& sentence : sentences) {
    ASSERT_EQ(sentence.words.size(), sentence.tags.size());
    length += static_cast<double>(sentence.words.size());
    for (size_t i = 0; i < sentence.words.size(); ++i) {
      const int tag = std::stoi(sentence.tags[i].substr(1));
      ASSERT_TRUE(tag >= 0 && tag < 40) << sentence.tags[i];
      if (sentence.words[i] == "w0") ++tags_of_w0[sentence.tags[i]];
    }
  }
  EXPECT_NEAR(length / 2000.0, 24.0, 2.0);
  int w0_total = 0, w0_most = 0;
  for (const auto& [tag, count] : tags_of_w0) {
    w0_total += count;
    w0_most = std::max(w0_most, count);
  }
  EXPECT_GT(w0_total, 1000);  // Zipf: w0 is about 11% of tokens
  EXPECT_GT(static_cast<double>(w0_most) / w0_total, 0.8);  // its home tag

  std::vector<Lattice> lattices = generate_lattices(1000, 3);
  double chars = 0, arcs = 0;
  for (const Lattice& lattice : lattices) {
    chars += static_cast<double>(lattice.chars.size());
    arcs += static_cast<double>(lattice.words.size());
    ASSERT_EQ(lattice.labels.size(), lattice.chars.size());
    for (const LatticeArc& arc : lattice.words) {
      std::string word;
      for (int i = arc.start; i <= arc.end; ++i) word += lattice.chars[i];
      ASSERT_EQ(arc.word, word);
      ASSERT_GE(arc.end - arc.start + 1, 2);
      ASSERT_LE(arc.end - arc.start + 1, 6);
    }
  }
  EXPECT_NEAR(chars / 1000.0, 30.0, 2.0);
  EXPECT_NEAR(arcs / 1000.0, 15.8, 1.5);
}

TEST(SampleVocabulary, MapsStringsToDenseIds) {
  Vocabulary vocabulary;
  EXPECT_EQ(vocabulary.size(), 1);
  EXPECT_EQ(vocabulary.word(0), "<unk>");
  EXPECT_EQ(vocabulary.add("<unk>"), 0);
  EXPECT_EQ(vocabulary.add("the"), 1);
  EXPECT_EQ(vocabulary.add("cat"), 2);
  EXPECT_EQ(vocabulary.add("the"), 1);
  EXPECT_EQ(vocabulary.id("cat"), 2);
  EXPECT_EQ(vocabulary.id("dog"), 0);
  EXPECT_EQ(vocabulary.word(2), "cat");
  EXPECT_EQ(vocabulary.size(), 3);
  EXPECT_FALSE(vocabulary.frozen());
  vocabulary.freeze();
  EXPECT_TRUE(vocabulary.frozen());
  EXPECT_EQ(vocabulary.add("dog"), 0);
  EXPECT_EQ(vocabulary.add("cat"), 2);
  EXPECT_EQ(vocabulary.size(), 3);
  EXPECT_THROW(vocabulary.word(3), UsageError);
  EXPECT_THROW(vocabulary.word(-1), UsageError);
}

// Saved vocabularies read back as they were written, give a model's ids back (restored ones are
// frozen: unknown words are <unk>, an unknown tag an error naming it), and a damaged file is an
// error naming its line.
TEST(SampleVocabulary, SavedVocabulariesRoundTripAndRestore) {
  Vocabulary words, tags;
  for (const char* w : {"the", "cat", "sat"}) words.add(w);
  for (const char* t : {"DT", "NN"}) tags.add(t);
  const std::string text = vocabularies_text({{"words", &words}, {"tags", &tags}});
  EXPECT_EQ(text, "edbatch vocabularies 1\nwords 4\n<unk>\nthe\ncat\nsat\ntags 3\n<unk>\nDT\nNN\n");
  std::istringstream in(text);
  ModelConfig config;
  config.vocabularies = std::make_shared<const SavedVocabularies>(parse_vocabularies(in, "m.vocab"));
  Vocabulary restored, restored_tags, chars;
  EXPECT_TRUE(restore_vocabulary(config, "words", restored));
  EXPECT_TRUE(restored.frozen());
  EXPECT_EQ(restored.words(), words.words());
  EXPECT_EQ(restored.add("cat"), 2);
  EXPECT_EQ(restored.add("dog"), 0);
  EXPECT_TRUE(restore_vocabulary(config, "tags", restored_tags));
  EXPECT_EQ(label_id(restored_tags, "NN", "tag", config), 2);
  EXPECT_EQ(edb::testing::usage_error([&] { label_id(restored_tags, "VB", "edb-run x: tag", config); }),
            "edb-run x: tag 'VB' is not one of the 2 the model was trained with (m.vocab)");
  EXPECT_EQ(edb::testing::usage_error([&] { restore_vocabulary(config, "chars", chars); }),
            "'m.vocab' has no vocabulary 'chars': it was saved with another model");
  EXPECT_FALSE(restore_vocabulary(ModelConfig{}, "words", chars));  // none saved: built from the data
  const auto parse_error = [](const std::string& bad) {
    std::istringstream bad_in(bad);
    return edb::testing::usage_error([&] { parse_vocabularies(bad_in, "m.vocab"); });
  };
  EXPECT_EQ(parse_error("a model\n"), "m.vocab:1:1: expected edbatch vocabularies 1, found 'a model'");
  EXPECT_EQ(parse_error("edbatch vocabularies 1\nwords many\n"),
            "m.vocab:2:1: expected a vocabulary's NAME COUNT, found 'words many'");
  EXPECT_EQ(parse_error("edbatch vocabularies 1\nwords 3\n<unk>\nthe\n"),
            "m.vocab:5:1: expected entry 3 of 3 of vocabulary 'words', found end of file");
  EXPECT_EQ(parse_error("edbatch vocabularies 1\nwords 1\nthe\n"), "m.vocab:3:1: expected <unk>, found 'the'");
  std::istringstream twice("edbatch vocabularies 1\nwords 3\n<unk>\nthe\nthe\n");
  config.vocabularies = std::make_shared<const SavedVocabularies>(parse_vocabularies(twice, "m.vocab"));
  EXPECT_EQ(edb::testing::usage_error([&] { restore_vocabulary(config, "words", chars); }),
            "'m.vocab': vocabulary 'words': edb::samples::Vocabulary::restore(): 'the' appears twice");
}

}  // namespace
}  // namespace edb::samples
