/*
 * cuda_runtime_api.h (CPU emulator) — the subset of the CUDA runtime API that
 * gpu/ and its tests call, for builds against the emulator (gpu/emu): device
 * memory is host memory, "device" 0 is the emulator, kernels launched with
 * CKG_LAUNCH run on fibers (ckg_emu.cpp).  Streams are in-order queues: work
 * on a stream runs when something waits for it (cudaStreamSynchronize, an
 * event, cudaDeviceSynchronize, or legacy-stream work, which waits for every
 * blocking stream but not for streams created with cudaStreamNonBlocking), so
 * a host read that does not wait for a kernel sees its output missing, as a
 * real device may.  C and C++.
 */
#ifndef CKG_EMU_CUDA_RUNTIME_API_H
#define CKG_EMU_CUDA_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorLaunchFailure = 719
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrComputeCapabilityMajor = 75
} cudaDeviceAttr;
typedef enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;

struct CUstream_st;
typedef struct CUstream_st *cudaStream_t;
struct CUevent_st;
typedef struct CUevent_st *cudaEvent_t;

#define cudaHostAllocDefault 0u
#define cudaStreamDefault 0u
#define cudaStreamNonBlocking 1u
#define cudaEventDefault 0u
#define cudaEventDisableTiming 2u

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);

cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);

cudaError_t ckg_emu_func_set_attribute(const void *f, cudaFuncAttribute a, int v);
/* Emulator statistics: bytes written by ckg_st16 (16-byte stores) so far. */
unsigned long long ckg_emu_st16_bytes_ull(void);
/* Emulator statistics: cudaDeviceGetAttribute and cudaFuncSetAttribute calls so far. */
unsigned long long ckg_emu_attr_calls_ull(void);

#ifdef __cplusplus
}
template <typename T>
static inline cudaError_t cudaFuncSetAttribute(T *f, cudaFuncAttribute a, int v)
{
    return ckg_emu_func_set_attribute((const void *)f, a, v);
}
#endif

#endif
