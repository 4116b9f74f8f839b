/* runtime/cuda/status.c — CUDA runtime and cuBLAS errors as nnrt_status
 * values with messages "what: cudaErrorName: description". */
#include "nnrt_cuda.h"

nnrt_status nnrt_cuda_status_of(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return NNRT_OK;
  case cudaErrorMemoryAllocation: return NNRT_E_NOMEM;
  case cudaErrorInvalidValue:
  case cudaErrorInvalidConfiguration:
  case cudaErrorInvalidPitchValue:
  case cudaErrorInvalidSymbol:
  case cudaErrorInvalidHostPointer:
  case cudaErrorInvalidDevicePointer:
  case cudaErrorInvalidMemcpyDirection:
  case cudaErrorInvalidResourceHandle:
  case cudaErrorInvalidDevice:
  case cudaErrorMemoryValueTooLarge:
  case cudaErrorInvalidClusterSize:
    return NNRT_E_ARG;
  case cudaErrorNotReady:
  case cudaErrorIllegalState:
  case cudaErrorCudartUnloading:
  case cudaErrorHostMemoryAlreadyRegistered:
  case cudaErrorHostMemoryNotRegistered:
  case cudaErrorPeerAccessAlreadyEnabled:
  case cudaErrorPeerAccessNotEnabled:
  case cudaErrorSetOnActiveProcess:
  case cudaErrorStreamCaptureUnsupported:
  case cudaErrorStreamCaptureInvalidated:
  case cudaErrorStreamCaptureMerge:
  case cudaErrorStreamCaptureUnmatched:
  case cudaErrorStreamCaptureUnjoined:
  case cudaErrorStreamCaptureIsolation:
  case cudaErrorStreamCaptureImplicit:
  case cudaErrorCapturedEvent:
  case cudaErrorStreamCaptureWrongThread:
    return NNRT_E_STATE;
  default:
    /* No device, driver trouble, launch failures, faults, and codes newer
     * than this file: the device side failed. */
    return NNRT_E_DEVICE;
  }
}

/* The errors a machine without a working GPU or driver gives on the first
 * call; their own descriptions do not always say so. */
static bool means_no_device(cudaError_t e) {
  switch (e) {
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorStubLibrary:
  case cudaErrorDevicesUnavailable:
  case cudaErrorInitializationError:
  case cudaErrorSystemDriverMismatch:
  case cudaErrorCompatNotSupportedOnDevice:
    return true;
  default: return false;
  }
}

nnrt_status nnrt_cuda_check(cudaError_t e, const char *what, nnrt_error *err) {
  if (e == cudaSuccess) return NNRT_OK;
  /* The failed call also set the runtime's last error; clear it so that the
   * next kernel's launch check reports its own launch, not this. Sticky
   * errors (a faulted context) stay whatever this does. */
  (void)cudaGetLastError();
  return nnrt_errorf(err, nnrt_cuda_status_of(e), "%s: %s: %s%s", what ? what : "CUDA",
                     cudaGetErrorName(e), cudaGetErrorString(e),
                     means_no_device(e) ? " (no usable CUDA device or driver)" : "");
}

nnrt_status nnrt_cuda_blas_status_of(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return NNRT_OK;
  case CUBLAS_STATUS_ALLOC_FAILED: return NNRT_E_NOMEM;
  case CUBLAS_STATUS_INVALID_VALUE:
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return NNRT_E_ARG;
  case CUBLAS_STATUS_NOT_INITIALIZED: return NNRT_E_STATE;
  case CUBLAS_STATUS_INTERNAL_ERROR: return NNRT_E_INTERNAL;
  case CUBLAS_STATUS_ARCH_MISMATCH:
  case CUBLAS_STATUS_MAPPING_ERROR:
  case CUBLAS_STATUS_EXECUTION_FAILED:
  case CUBLAS_STATUS_LICENSE_ERROR:
  default:
    return NNRT_E_DEVICE;
  }
}

nnrt_status nnrt_cuda_blas_check(cublasStatus_t s, const char *what, nnrt_error *err) {
  if (s == CUBLAS_STATUS_SUCCESS) return NNRT_OK;
  return nnrt_errorf(err, nnrt_cuda_blas_status_of(s), "%s: %s: %s", what ? what : "cuBLAS",
                     cublasLtGetStatusName(s), cublasLtGetStatusString(s));
}
