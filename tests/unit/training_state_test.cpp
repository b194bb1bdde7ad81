// save_training / load_training (edbatch/train.h): a model and its optimizer state saved as one
// unit. A save killed at any moment (fork, kill -9) leaves either one save's complete pair, which
// loads, or a mixed one, which is refused naming both files; never a mixed pair accepted. Saves to
// one path at once (threads, processes) all succeed and leave the last one's pair; a full disk
// leaves nothing behind (ir/files.h's durable writer). And the files a user names that are not
// files to read get one UsageError naming the path.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

#include "ir/files.h"
#include "scheduler/policy_file.h"
#include "tests/support/test_support.h"

namespace edb {
namespace {

using testing::usage_error;

// Save k: every model value is k and the optimizer has taken k steps, so a loaded pair is one
// save's exactly when the two agree.
void set_save(Model& model, Optimizer& optimizer, int k) {
  for (float& v : model.parameter("W").values()) v = float(k);
  while (optimizer.steps() < k) optimizer.step(Gradients{});
}

// A model of one 64 x 64 parameter (16 KB: a save takes long enough to be killed inside) and its
// Adam optimizer.
struct Pair {
  Model model{"pair", 1};
  Parameter W = model.add_parameter("W", 64, 64);
  Optimizer optimizer{model};
};

TEST(TrainingState, ASavedPairLoadsAndAMixedPairIsRefusedNamingBothFiles) {
  testing::TempDir dir;
  const std::string path = dir.file("model");
  Pair pair;
  Model& model = pair.model;
  Optimizer& optimizer = pair.optimizer;
  set_save(model, optimizer, 3);
  save_training(model, optimizer, path);
  set_save(model, optimizer, 5);
  model.save(dir.file("later"));

  Pair other;
  Model& loaded = other.model;
  Optimizer& loaded_optimizer = other.optimizer;
  EXPECT_TRUE(load_training(loaded, loaded_optimizer, path));
  EXPECT_EQ(loaded.parameter("W").values()[0], 3.0f);
  EXPECT_EQ(loaded_optimizer.steps(), 3);
  EXPECT_EQ(testing::leftovers(dir.path()), std::vector<std::string>{});

  // The model of a later save beside the state of an earlier one: refused, nothing loaded.
  std::filesystem::copy_file(dir.file("later"), path, std::filesystem::copy_options::overwrite_existing);
  Pair third;
  Model& fresh = third.model;
  Optimizer& fresh_optimizer = third.optimizer;
  const float before = fresh.parameter("W").values()[0];
  EXPECT_EQ(usage_error([&] { load_training(fresh, fresh_optimizer, path); }),
            "edb::load_training(): '" + path + ".optimizer' was not saved with the model values in '" + path +
                "' (files of different saves, or a save interrupted between the two); load the model alone, or the "
                "pair of one save");
  EXPECT_EQ(fresh.parameter("W").values()[0], before);
  EXPECT_EQ(fresh_optimizer.steps(), 0);

  // Without a state file: the model alone, and false.
  std::filesystem::remove(path + ".optimizer");
  EXPECT_FALSE(load_training(fresh, fresh_optimizer, path));
  EXPECT_EQ(fresh.parameter("W").values()[0], 5.0f);
}

TEST(TrainingState, FiftySavesKilledAtRandomNeverLoadAMixedPair) {
  testing::TempDir dir;
  const std::string path = dir.file("model");
  {
    Pair first;
    set_save(first.model, first.optimizer, 0);
    save_training(first.model, first.optimizer, path);  // save 0: a complete pair before any kill
  }
  std::mt19937 random(7);
  int complete = 0, refused = 0;
  for (int kill = 0; kill < 50; ++kill) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      Pair saving;
      for (int k = 1;; ++k) {
        set_save(saving.model, saving.optimizer, k);
        save_training(saving.model, saving.optimizer, path);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200 + random() % 5000));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    Pair loading;
    Model& model = loading.model;
    Optimizer& optimizer = loading.optimizer;
    const std::string error = usage_error([&] { ASSERT_TRUE(load_training(model, optimizer, path)); });
    if (error.empty()) {
      ++complete;  // one save's pair, or the previous one after a save killed between its renames
      EXPECT_EQ(double(model.parameter("W").values()[0]), double(optimizer.steps())) << "kill " << kill;
      EXPECT_EQ(model.parameter("W").values()[4095], model.parameter("W").values()[0]) << "kill " << kill;
    } else {
      ++refused;
      EXPECT_NE(error.find("was not saved with the model values"), std::string::npos) << "kill " << kill << ": " << error;
    }
  }
  EXPECT_EQ(complete + refused, 50);
  EXPECT_EQ(refused, 0);  // the previous pair is kept until a save is complete
  std::printf("50 kills: %d complete pairs loaded, %d mixed pairs refused\n", complete, refused);
}

// Writer w's save s (1-based) is save k = 100 * w + s: a pair loaded is one save's when W and the
// steps agree, and the last save of some writer when k % 100 is its count of saves.
constexpr int kSavesPerWriter = 4;

// What `path` holds after saves at once: one writer's last save, whole, and nothing left behind.
void expect_last_save_of_one_writer(const testing::TempDir& dir, const std::string& path, int round) {
  Pair loading;
  const std::string error =
      usage_error([&] { EXPECT_TRUE(load_training(loading.model, loading.optimizer, path)) << "round " << round; });
  ASSERT_EQ(error, "") << "round " << round;
  const float k = loading.model.parameter("W").values()[0];
  EXPECT_EQ(double(k), double(loading.optimizer.steps())) << "round " << round << ": a mixed pair";
  EXPECT_EQ(loading.model.parameter("W").values()[4095], k) << "round " << round;
  EXPECT_EQ(int(k) % 100, kSavesPerWriter) << "round " << round << ": not a writer's last save";
  EXPECT_EQ(testing::leftovers(dir.path()), std::vector<std::string>{}) << "round " << round;
}

// Four threads save_training to one path at once, four saves each, ten times: every save
// succeeds (before, all wrote PATH.tmp: one renamed another's file, or found it gone).
TEST(TrainingState, SavesFromThreadsAtOnceAllSucceedAndLeaveOneWritersLastPair) {
  testing::TempDir dir;
  const std::string path = dir.file("model");
  for (int round = 0; round < 10; ++round) {
    constexpr int kWriters = 4;
    std::vector<std::unique_ptr<Pair>> pairs;
    for (int w = 0; w < kWriters; ++w) pairs.push_back(std::make_unique<Pair>());
    std::atomic<int> ready{0}, failures{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w)
      writers.emplace_back([&, w] {
        ++ready;
        while (ready < kWriters) std::this_thread::yield();
        for (int save = 1; save <= kSavesPerWriter; ++save) {
          set_save(pairs[size_t(w)]->model, pairs[size_t(w)]->optimizer, 100 * (w + 1) + save);
          if (!usage_error([&] { save_training(pairs[size_t(w)]->model, pairs[size_t(w)]->optimizer, path); }).empty())
            ++failures;
        }
      });
    for (std::thread& t : writers) t.join();
    EXPECT_EQ(failures, 0) << "round " << round;
    expect_last_save_of_one_writer(dir, path, round);
  }
}

// The same with four processes (two trainings saving to one path: edb-run --load D/m --save D/m),
// eight times; each child exits 0 only when all its saves succeeded.
TEST(TrainingState, SavesFromProcessesAtOnceAllSucceedAndLeaveOneWritersLastPair) {
  testing::TempDir dir;
  const std::string path = dir.file("model");
  for (int round = 0; round < 8; ++round) {
    std::vector<pid_t> children;
    for (int w = 0; w < 4; ++w) {
      const pid_t child = fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        int failed = 0;
        Pair saving;
        for (int save = 1; save <= kSavesPerWriter; ++save) {
          set_save(saving.model, saving.optimizer, 100 * (w + 1) + save);
          try {
            save_training(saving.model, saving.optimizer, path);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "writer %d: %s\n", w, e.what());
            failed = 1;
          }
        }
        ::_exit(failed);
      }
      children.push_back(child);
    }
    for (pid_t child : children) {
      int status = 0;
      ASSERT_EQ(::waitpid(child, &status, 0), child);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round << ": a save failed";
    }
    expect_last_save_of_one_writer(dir, path, round);
  }
}

// Loads while another thread saves to the same path, over and over (a training resumed from a
// path another one is saving to): every load gets one save's whole pair. Before, a load could read
// the model of one save and the state of the next, or find `previous` already gone, and refuse.
TEST(TrainingState, LoadsWhileSavesRunAlwaysGetOneSavesPair) {
  testing::TempDir dir;
  const std::string path = dir.file("model");
  {
    Pair first;
    set_save(first.model, first.optimizer, 1);
    save_training(first.model, first.optimizer, path);
  }
  std::atomic<bool> done{false};
  std::atomic<int> save_failures{0};
  std::thread saver([&] {
    Pair saving;
    for (int k = 2; !done; ++k) {
      set_save(saving.model, saving.optimizer, k);
      if (!usage_error([&] { save_training(saving.model, saving.optimizer, path); }).empty()) ++save_failures;
    }
  });
  int refused = 0, mixed = 0;
  for (int load = 0; load < 300; ++load) {
    Pair loading;
    const std::string error = usage_error([&] { load_training(loading.model, loading.optimizer, path); });
    if (!error.empty()) {
      if (refused++ == 0) ADD_FAILURE() << "load " << load << ": " << error;
      continue;
    }
    const std::span<float> w = loading.model.parameter("W").values();
    if (double(w[0]) != double(loading.optimizer.steps()) || w[4095] != w[0]) ++mixed;
  }
  done = true;
  saver.join();
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(mixed, 0);
  EXPECT_EQ(save_failures, 0);
  EXPECT_EQ(testing::leftovers(dir.path()), std::vector<std::string>{});
}

// Runs `write` in a child process whose files may grow to `bytes` (a disk that fills up: writes
// past it fail with EFBIG); returns the child's UsageError message, or "" when it threw none.
std::string on_a_full_disk(uint64_t bytes, const std::function<void()>& write) {
  int pipe_ends[2];
  if (::pipe(pipe_ends) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child == 0) {
    ::close(pipe_ends[0]);
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{bytes, bytes};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string message = usage_error(write);
    ssize_t ignored = ::write(pipe_ends[1], message.data(), message.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(pipe_ends[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_ends[0], buffer, sizeof buffer)) > 0;) message.append(buffer, size_t(n));
  ::close(pipe_ends[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return message;
}

// A write the disk cannot hold fails naming the file and leaves no partial file, no temporary and
// no lock behind: the model, the pair, a policy file, and the writer itself. What was there stays.
TEST(TrainingState, AFullDiskLeavesNothingBehindAndKeepsWhatWasThere) {
  testing::TempDir dir;
  Pair pair;
  const std::string model = dir.file("model"), saved = dir.file("saved");
  std::string error = on_a_full_disk(4096, [&] { pair.model.save(model); });
  EXPECT_EQ(error, "edb::Model::save(): cannot write '" + model + "': File too large");
  EXPECT_FALSE(std::filesystem::exists(model));
  error = on_a_full_disk(4096, [&] { save_training(pair.model, pair.optimizer, model); });
  EXPECT_EQ(error, "edb::save_training(): cannot write '" + model + "': File too large");
  EXPECT_FALSE(std::filesystem::exists(model));
  EXPECT_FALSE(std::filesystem::exists(model + ".optimizer"));
  // A pair saved before stays whole when a later save fails; a limit between the two files' sizes
  // lets the first temporary be written whole before the second fails.
  set_save(pair.model, pair.optimizer, 2);
  save_training(pair.model, pair.optimizer, saved);
  const std::string model_before = testing::read_file(saved), state_before = testing::read_file(saved + ".optimizer");
  set_save(pair.model, pair.optimizer, 3);
  error = on_a_full_disk(std::min(model_before.size(), state_before.size()) + 1,
                         [&] { save_training(pair.model, pair.optimizer, saved); });
  EXPECT_NE(error.find("': File too large"), std::string::npos) << error;
  EXPECT_TRUE(testing::read_file(saved) == model_before);
  EXPECT_TRUE(testing::read_file(saved + ".optimizer") == state_before);
  const nlohmann::json content = {{"states", std::string(10000, 'x')}};
  error = on_a_full_disk(1000, [&] { scheduler::policy_file::write(dir.file("policy"), "edbatch-fsm-policy", 1, content); });
  EXPECT_EQ(error, "edb::Engine: policy file '" + dir.file("policy") + "': cannot write '" + dir.file("policy") +
                       "': File too large");
  EXPECT_FALSE(std::filesystem::exists(dir.file("policy")));
  error = on_a_full_disk(10, [&] {
    if (const std::string why = ir::write_file(dir.file("plain"), std::string(100, 'y')); !why.empty())
      throw UsageError(why);
  });
  EXPECT_EQ(error, "cannot write '" + dir.file("plain") + "': File too large");
  EXPECT_FALSE(std::filesystem::exists(dir.file("plain")));
  EXPECT_EQ(testing::leftovers(dir.path()), std::vector<std::string>{});
}

TEST(TrainingState, FilesThatAreNotFilesToReadNameThePathAndWhy) {
  testing::TempDir dir;
  Pair pair;
  Model& model = pair.model;
  Optimizer& optimizer = pair.optimizer;
  EXPECT_EQ(usage_error([&] { model.load(dir.path()); }), "edb::Model::load(): '" + dir.path() + "' is a directory");
  EXPECT_EQ(usage_error([&] { model.load("/dev/zero"); }),
            "edb::Model::load(): '/dev/zero' is not a regular file (a device, pipe or socket)");
  EXPECT_EQ(usage_error([&] { optimizer.load(dir.file("none")); }),
            "edb::Optimizer::load(): '" + dir.file("none") + "' does not exist");
  EXPECT_EQ(usage_error([&] { save_training(model, optimizer, dir.path()); }),
            "edb::save_training(): '" + dir.path() + "' is a directory; give a file name in it");
  // A device or pipe is never replaced by the renamed file (as root, /dev/null would be).
  ASSERT_EQ(::mkfifo(dir.file("pipe").c_str(), 0644), 0);
  EXPECT_EQ(usage_error([&] { save_training(model, optimizer, dir.file("pipe")); }),
            "edb::save_training(): '" + dir.file("pipe") +
                "' is not a regular file (a device, pipe or socket); give the name of a file to write");
  EXPECT_EQ(usage_error([&] { model.save(dir.file("pipe")); }),
            "edb::Model::save(): '" + dir.file("pipe") +
                "' is not a regular file (a device, pipe or socket); give the name of a file to write");
  EXPECT_TRUE(std::filesystem::is_fifo(dir.file("pipe")));
  EngineOptions options;
  options.policy = "fsm";
  options.policy_file = dir.path();
  EXPECT_EQ(usage_error([&] { Engine engine(options); }), "edb::Engine: policy file '" + dir.path() + "': is a directory");
}

}  // namespace
}  // namespace edb
