#include "host/train/stop_request.h"

#include <stdexcept>

namespace accel::train {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void record_stop_signal(int signal) {
  if (g_stop_signal == 0) g_stop_signal = signal;
}

void install(int signal, struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: a read or write the signal interrupts goes on (the step
  // finishes); SA_RESETHAND: the next one of the same signal is fatal.
  action.sa_flags = SA_RESTART | SA_RESETHAND;
  if (sigaction(signal, &action, previous) != 0) throw std::runtime_error("sigaction failed");
}

}  // namespace

StopRequestScope::StopRequestScope() {
  g_stop_signal = 0;
  install(SIGTERM, &previous_term_);
  install(SIGUSR1, &previous_usr1_);
}

StopRequestScope::~StopRequestScope() {
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
}

int pending_stop_signal() { return g_stop_signal; }

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

}  // namespace accel::train
