/* runtime/cuda/stream.c — streams and timing events. */
#include "nnrt_cuda_impl.h"

nnrt_status nnrt_cuda_stream_create(cudaStream_t *out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_stream_create: out is NULL");
  *out = NULL;
  nnrt_status st = nnrt_cuda_need_device("creating a CUDA stream", err);
  if (st != NNRT_OK) return st;
  /* Non-blocking: work on the legacy default stream (some library's) does not
   * serialize with the model's. */
  return nnrt_cuda_check(cudaStreamCreateWithFlags(out, cudaStreamNonBlocking),
                         "creating a CUDA stream", err);
}

void nnrt_cuda_stream_destroy(cudaStream_t s) {
  if (s) cudaStreamDestroy(s);
}

nnrt_status nnrt_cuda_stream_sync(cudaStream_t s, nnrt_error *err) {
  return nnrt_cuda_check(cudaStreamSynchronize(s), "waiting for a CUDA stream", err);
}

nnrt_status nnrt_cuda_event_create(cudaEvent_t *out, nnrt_error *err) {
  if (!out) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_event_create: out is NULL");
  *out = NULL;
  nnrt_status st = nnrt_cuda_need_device("creating a CUDA event", err);
  if (st != NNRT_OK) return st;
  return nnrt_cuda_check(cudaEventCreate(out), "creating a CUDA event", err);
}

void nnrt_cuda_event_destroy(cudaEvent_t e) {
  if (e) cudaEventDestroy(e);
}

nnrt_status nnrt_cuda_event_record(cudaEvent_t e, cudaStream_t s, nnrt_error *err) {
  if (!e) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_event_record: event is NULL");
  return nnrt_cuda_check(cudaEventRecord(e, s), "recording a CUDA event", err);
}

nnrt_status nnrt_cuda_event_sync(cudaEvent_t e, nnrt_error *err) {
  if (!e) return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_event_sync: event is NULL");
  return nnrt_cuda_check(cudaEventSynchronize(e), "waiting for a CUDA event", err);
}

nnrt_status nnrt_cuda_event_elapsed_ms(cudaEvent_t start, cudaEvent_t stop, float *ms,
                                       nnrt_error *err) {
  if (!start || !stop || !ms)
    return nnrt_errorf(err, NNRT_E_ARG, "nnrt_cuda_event_elapsed_ms: %s is NULL",
                       !start ? "start" : !stop ? "stop" : "ms");
  *ms = 0;
  nnrt_status st = nnrt_cuda_check(cudaEventSynchronize(stop), "waiting for a CUDA event", err);
  if (st != NNRT_OK) return st;
  return nnrt_cuda_check(cudaEventElapsedTime(ms, start, stop),
                         "timing between two CUDA events", err);
}
