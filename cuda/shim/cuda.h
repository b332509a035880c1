/*
 * cuda.h shim for building github.com/mumax/3/cuda/cu against CUDA 13 headers.
 *
 * CUDA 13's cuda.h maps cuCtxCreate to cuCtxCreate_v4, which takes an extra
 * CUctxCreateParams* argument; mumax's cu.CtxCreate calls the three-argument
 * form and fails to compile. This header, placed first on the include path
 * (CGO_CFLAGS="-I<this dir> -I$CUDA_HOME/include", as mk/cuda.mk does),
 * includes the toolkit's cuda.h and maps cuCtxCreate back to cuCtxCreate_v2,
 * which every CUDA 12 and 13 driver still exports. With CUDA 12 headers the
 * mapping is already cuCtxCreate_v2 and this shim changes nothing.
 */
#ifndef KINTSUGI_CUDA_SHIM_H
#define KINTSUGI_CUDA_SHIM_H

#include_next <cuda.h>

#if defined(CUDA_VERSION) && CUDA_VERSION >= 13000
#undef cuCtxCreate
#define cuCtxCreate cuCtxCreate_v2
#ifdef __cplusplus
extern "C" {
#endif
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
#ifdef __cplusplus
}
#endif
#endif

#endif /* KINTSUGI_CUDA_SHIM_H */
