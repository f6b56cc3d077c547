// Crash consistency: a process SIGKILLed at any point of save_checkpoint leaves, in the
// checkpoint directory, either the old checkpoint or the new one, complete and loadable.
// A forked child trains and saves with the engine's save_point hook killing it at one point;
// the parent then reads what is on disk.
#include <gtest/gtest.h>

#include "engine/checkpoint_reader.h"
#include "engine/engine.h"
#include "engine/errors.h"
#include "engine/tests/test_configs.h"
#include "engine/testing/training.h"
#include "engine/testing/models.h"
#include "harness/world/world.h"

#include <ATen/ATen.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sys/wait.h>
#include <unistd.h>

namespace zero3 {
namespace {

namespace fs = std::filesystem;

// Trains `steps` steps of "odd" on 2 ranks and saves into `dir`; the rank `kill_rank` kills its
// process at save point `kill_at` (none when empty).
void train_and_save(const std::string& dir, int64_t steps, const std::string& kill_at, int kill_rank) {
  zerocheck::make_world(2)->run([&](Comm& comm) {
    const auto spec = zerocheck::model_spec("odd");
    auto model = spec.build(4);
    auto user = zerocheck::adam_factory(0.05)(unique_parameters(*model));
    const Config config = all_partitioned();
    EngineOptions options;
    if (comm.rank() == kill_rank)
      options.save_point = [kill_at](const std::string& point) {
        if (point == kill_at) ::raise(SIGKILL);
      };
    auto engine = initialize(model, *user, config, comm, options);
    for (int64_t s = 0; s < steps; ++s) {
      const auto batch = zerocheck::make_batch(spec, 4, s, comm.rank(), 2);
      engine->backward(zerocheck::training_loss(engine->forward(batch.input), batch.target));
      engine->step();
      engine->zero_grad();
    }
    engine->save_checkpoint(dir);
  });
}

// Runs `body` in a forked child and returns its wait status. The parent itself never trains:
// LibTorch 2.x refuses autograd in a child forked after the parent ran a backward ("Unable to
// handle autograd's threading in combination with fork-based multiprocessing").
int in_child(const std::function<void()>& body) {
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  return ::waitpid(child, &status, 0) == child ? status : -1;
}

// The full parameters a checkpoint holds (verifying it on the way).
std::vector<at::Tensor> contents(const std::string& dir) {
  const LoadedCheckpoint c = read_checkpoint(dir);
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < c.manifest.params.size(); ++i) out.push_back(c.full_parameter(i));
  return out;
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

TEST(CheckpointKill, AKillAtAnyPointOfSaveLeavesTheOldOrTheNewCheckpoint) {
  const fs::path root = fs::temp_directory_path() / ("zerocheck_kill_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::string old_dir = (root / "old").string(), new_dir = (root / "new").string(), dir = (root / "ckpt").string();
  ASSERT_EQ(in_child([&] { train_and_save(old_dir, 1, "", -1); }), 0);
  ASSERT_EQ(in_child([&] { train_and_save(new_dir, 3, "", -1); }), 0);
  const auto old_contents = contents(old_dir), new_contents = contents(new_dir);
  ASSERT_FALSE(same(old_contents, new_contents));

  struct Kill {
    std::string point;
    int rank;
    bool expect_new;
  };
  const std::vector<Kill> kills = {{"staging", 0, false},  {"rank-file", 1, false}, {"rank-file", 0, false},
                                   {"manifest", 0, false}, {"exchanged", 0, true},  {"done", 1, true}};
  for (const Kill& kill : kills) {
    fs::remove_all(dir);
    fs::copy(old_dir, dir);
    const int status = in_child([&] { train_and_save(dir, 3, kill.point, kill.rank); });
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "rank " << kill.rank << " at '" << kill.point << "' was not killed (status " << status << ")";
    std::vector<at::Tensor> found;
    try {
      found = contents(dir);
    } catch (const CheckpointError& e) {
      FAIL() << "killed at '" << kill.point << "': the checkpoint does not verify: " << e.what();
    }
    const bool is_old = same(found, old_contents), is_new = same(found, new_contents);
    EXPECT_TRUE(is_old || is_new) << "killed at '" << kill.point << "': neither the old nor the new checkpoint";
    EXPECT_EQ(is_new, kill.expect_new) << "killed at '" << kill.point << "'";
    std::cout << "killed rank " << kill.rank << " at '" << kill.point << "': directory holds the "
              << (is_new ? "new" : is_old ? "old" : "MIXED") << " checkpoint, verified\n";
  }
  // What a killed save left beside the directory does not stop the next one (in a child too: no
  // case of this binary trains in its own process, in_child says why).
  ASSERT_EQ(in_child([&] { train_and_save(dir, 3, "", -1); }), 0);
  EXPECT_TRUE(same(contents(dir), new_contents));
  EXPECT_FALSE(fs::exists(dir + ".zero3-staging"));
  fs::remove_all(root);
}

TEST(CheckpointKill, ASaveNeverReplacesADirectoryThatIsNotACheckpoint) {
  const fs::path dir = fs::temp_directory_path() / ("zerocheck_notckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  { std::ofstream(dir / "notes.txt") << "mine"; }
  // In a child too, so that no case of this binary trains in its own process (in_child's reason).
  const int status = in_child([&] {
    try {
      train_and_save(dir.string(), 1, "", -1);
    } catch (const zerocheck::RankFailure& e) {
      std::fprintf(stderr, "child: refused: %s\n", e.what());
      ::_exit(std::string(e.what()).find("notes.txt") != std::string::npos ? 0 : 4);
    }
    std::fprintf(stderr, "child: saved over a directory holding notes.txt\n");
    ::_exit(5);
  });
  EXPECT_EQ(status, 0) << "exit 4: refused without naming notes.txt; 5: saved over it (the child's stderr says)";
  EXPECT_TRUE(fs::exists(dir / "notes.txt"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zero3
