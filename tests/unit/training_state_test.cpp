// save_training / load_training (edbatch/train.h): a model and its optimizer state saved as one
// unit. A save killed at any moment (fork, kill -9) leaves either one save's complete pair, which
// loads, or a mixed one, which is refused naming both files; never a mixed pair accepted. And the
// files a user names that are not files to read get one UsageError naming the path.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include <edbatch/edbatch.h>
#include <edbatch/train.h>

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
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(path + ".optimizer.tmp"));

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
