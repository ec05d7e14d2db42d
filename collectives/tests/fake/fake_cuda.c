/*
 * A stand-in libcuda.so.1 for tests/cuda_status.rs: the five driver functions cuda_status()
 * calls, with answers chosen by environment variables. Built at test time with the system cc.
 *   FAKE_CUDA_INIT     cuInit's result (default 0; 100 is CUDA_ERROR_NO_DEVICE)
 *   FAKE_CUDA_DEVICES  cuDeviceGetCount's count (default 0)
 * With -DNO_DEVICE_GET_COUNT, cuDeviceGetCount is missing.
 */
#include <stdlib.h>

typedef int CUresult;

static int env_int(const char *name, int fallback) {
    const char *value = getenv(name);
    return value ? atoi(value) : fallback;
}

CUresult cuDriverGetVersion(int *version) {
    *version = 12080;
    return 0;
}

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return env_int("FAKE_CUDA_INIT", 0);
}

#ifndef NO_DEVICE_GET_COUNT
CUresult cuDeviceGetCount(int *count) {
    *count = env_int("FAKE_CUDA_DEVICES", 0);
    return 0;
}
#endif

CUresult cuGetErrorName(CUresult error, const char **name) {
    *name = error == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    *text = error == 100 ? "no CUDA-capable device is detected" : "unknown error";
    return 0;
}
