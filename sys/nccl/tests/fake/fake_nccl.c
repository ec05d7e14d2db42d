/* A stand-in libnccl.so.2 for tests/fake_library.rs: exports NCCL's names so the loader's
 * version gate and symbol checks can be tested without a real (or old) NCCL. Built by the
 * test with -DFAKE_VERSION=<NCCL_VERSION_CODE>, and -DOMIT_ALLREDUCE to leave out a
 * required symbol. Only ncclGetVersion, ncclGetErrorString and ncclGetUniqueId are called. */
#include <string.h>

int ncclGetVersion(int *version) { *version = FAKE_VERSION; return 0; }
const char *ncclGetErrorString(int code) { return code == 0 ? "fake: no error" : "fake: error"; }
int ncclGetUniqueId(void *id) { memset(id, 0x5a, 128); return 0; }

int ncclCommInitRank(void) { return 3; }
#ifndef OMIT_ALLREDUCE
int ncclAllReduce(void) { return 3; }
#endif
int ncclBroadcast(void) { return 3; }
int ncclAllGather(void) { return 3; }
int ncclCommDestroy(void) { return 3; }
int ncclCommAbort(void) { return 3; }
int ncclCommGetAsyncError(void) { return 3; }

/* Optional: ncclCommSplit is 2.18, ncclMemAlloc 2.19; ncclSend and the rest are absent. */
int ncclCommSplit(void) { return 3; }
int ncclMemAlloc(void) { return 3; }
