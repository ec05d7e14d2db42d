/* Stand-in for the CUDA runtime header, used only by scripts/regen-nccl-bindings.sh.
 * nccl.h needs nothing from CUDA but the stream handle type (and size_t); the real header is not
 * installed here and is not needed to describe NCCL's ABI. CUDART_VERSION is left
 * undefined so nccl.h skips cuda_bf16.h and cuda_fp8.h. */
#ifndef DTCOMM_NCCL_REGEN_CUDA_RUNTIME_H
#define DTCOMM_NCCL_REGEN_CUDA_RUNTIME_H
#include <stddef.h> /* size_t, as the real header's includes provide it */
typedef struct CUstream_st *cudaStream_t;
#endif
