// The Trainer's registration in the host context ends with the Trainer:
// plugins tear down after it and may still call services (the profiler's
// closing clock-sync send), whose collective checks look up the model.
#include <gtest/gtest.h>

#include "host/runtime/host_context.h"
#include "host/train/trainer.h"

namespace {

TEST(TrainerContext, TheModelIsWithdrawnWhenTheTrainerEnds) {
  accel::RunConfig config;
  config.model = "gpt-tiny";
  config.model_overrides.n_layer = 1;
  config.model_overrides.seq_len = 16;
  config.batch_size = 2;
  config.steps = 0;
  accel::runtime::HostContext context;
  {
    accel::train::Trainer trainer(config, /*rank=*/0, /*world_size=*/1, /*hooks=*/nullptr, &context);
    EXPECT_NE(context.model, nullptr);
  }
  EXPECT_EQ(context.model, nullptr) << "a destroyed trainer's model stayed registered";
}

}  // namespace
