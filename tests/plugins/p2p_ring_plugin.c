/* Test plugin (C): in setup, every rank sends its rank to the next rank and
 * receives from the previous one, both in one batch (batch_begin/batch_end)
 * so the order of send and recv cannot deadlock; then checks what arrived.
 * Also checks a plain async send/recv pair the same way, and a barrier. */
#include <accel/accel.h>

#include <stdio.h>
#include <stdlib.h>

struct AccelPlugin {
  AccelHost* host;
  const AccelHostServices* services;
};

static DLTensor scalar_i32(int32_t* value, int64_t* no_shape) {
  DLTensor t = {.data = NULL};
  t.data = value;
  t.device.device_type = kDLCPU;
  t.dtype.code = kDLInt;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = no_shape;
  t.strides = no_shape;
  return t;
}

static AccelStatus on_create(AccelCreateArgs* args) {
  AccelPlugin* self = (AccelPlugin*)calloc(1, sizeof(AccelPlugin));
  if (!self) return ACCEL_ERROR_OUT_OF_MEMORY;
  self->host = args->host;
  self->services = args->services;
  args->self = self;
  return ACCEL_OK;
}

static AccelStatus ring(AccelPlugin* self, int batched) {
  const AccelCommServices* comm = self->services->comm;
  const AccelIdentity* id = NULL;
  AccelStatus status = self->services->get_identity(self->host, &id);
  if (status != ACCEL_OK) return status;
  int64_t no_shape = 0;
  int32_t mine = id->rank, got = -1;
  DLTensor out = scalar_i32(&mine, &no_shape), in = scalar_i32(&got, &no_shape);
  AccelCollectiveArgs send = {.struct_size = sizeof(AccelCollectiveArgs)};
  AccelCollectiveArgs recv = {.struct_size = sizeof(AccelCollectiveArgs)};
  send.input = &out;
  send.peer = (id->rank + 1) % id->world_size;
  send.label = "p2p ring send";
  recv.output = &in;
  recv.peer = (id->rank + id->world_size - 1) % id->world_size;
  recv.label = "p2p ring recv";
  AccelWork* works[2] = {NULL, NULL};
  if (batched) {
    if ((status = comm->batch_begin(self->host)) != ACCEL_OK) return status;
    /* recv first on purpose: unbatched, every rank would wait here forever. */
    if ((status = comm->recv(self->host, &recv, NULL)) != ACCEL_OK) return status;
    if ((status = comm->send(self->host, &send, NULL)) != ACCEL_OK) return status;
    if ((status = comm->batch_end(self->host, &works[0])) != ACCEL_OK) return status;
  } else {
    if ((status = comm->recv(self->host, &recv, &works[0])) != ACCEL_OK) return status;
    if ((status = comm->send(self->host, &send, &works[1])) != ACCEL_OK) return status;
  }
  for (int i = 0; i < 2; ++i) {
    if (!works[i]) continue;
    if ((status = comm->work_wait(self->host, works[i], NULL)) != ACCEL_OK) return status;
    if ((status = comm->work_free(self->host, works[i])) != ACCEL_OK) return status;
  }
  if (got != recv.peer) {
    char message[96];
    snprintf(message, sizeof message, "rank %d received %d from rank %d", (int)id->rank, (int)got, (int)recv.peer);
    self->services->set_error(self->host, ACCEL_ERROR_INTERNAL, message);
    return ACCEL_ERROR_INTERNAL;
  }
  return ACCEL_OK;
}

static AccelStatus on_setup(AccelPlugin* self, const AccelSetupArgs* args) {
  (void)args;
  AccelStatus status = ring(self, 1);
  if (status == ACCEL_OK) status = ring(self, 0);
  if (status != ACCEL_OK) return status;
  AccelCollectiveArgs barrier = {.struct_size = sizeof(AccelCollectiveArgs)};
  barrier.label = "p2p ring barrier";
  status = self->services->comm->barrier(self->host, &barrier, NULL);
  if (status == ACCEL_OK) self->services->log(self->host, ACCEL_LOG_WARN, "ring exchange verified");
  return status;
}

static AccelStatus on_teardown(AccelPlugin* self) {
  free(self);
  return ACCEL_OK;
}

static const AccelHooks kHooks = {
    .struct_size = sizeof(AccelHooks), .create = on_create, .setup = on_setup, .teardown = on_teardown};

static const AccelPluginDescriptor kDescriptor = {
    .struct_size = sizeof(AccelPluginDescriptor),
    .abi_version = {ACCEL_ABI_VERSION_MAJOR, ACCEL_ABI_VERSION_MINOR},
    .name = "p2p_ring",
    .version = "1.0.0",
    .description = "test plugin: batched and plain send/recv around a ring",
    .kind = ACCEL_PLUGIN_OBSERVER,
    .capabilities = ACCEL_CAP_CPU,
    .hooks = &kHooks,
};

ACCEL_PLUGIN_EXPORT AccelStatus accel_plugin_init_v1(const AccelHostInfo* info,
                                                     const AccelPluginDescriptor** descriptor) {
  (void)info;
  *descriptor = &kDescriptor;
  return ACCEL_OK;
}
