/*
 * dtcomm from C: every rank allreduces (and gathers, broadcasts, reduce-scatters; complex64,
 * bool and bitwise ops too) and checks the results. Rank, world size and the rendezvous come from the launcher's environment, as
 * in Python's dtcomm.init():
 *
 *   DTCOMM_RANK=0 DTCOMM_WORLD_SIZE=2 DTCOMM_RDZV_ENDPOINT=host:29400 ./allreduce
 *
 * With --bench ITERS_8B ITERS_64MIB it times allreduce calls of 8 bytes and 64 MiB instead
 * (float32 sum, in place; a tenth of the iterations as warm-up, then a barrier) and prints one
 * BENCH line per size: microseconds per call on this rank.
 */
#include "dtcomm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void bench(dtcomm_comm_t comm, int rank, int iters_small, int iters_large) {
    const size_t sizes[2] = {2, (size_t)16 << 20}; /* 8 B and 64 MiB of float32 */
    const int iters[2] = {iters_small, iters_large};
    for (int s = 0; s < 2; s++) {
        size_t n = sizes[s];
        float *buf = calloc(n, sizeof(float));
        EXPECT(buf != NULL, "out of memory");
        for (int w = 0; w < iters[s] / 10 + 1; w++)
            CHECK(dtcomm_all_reduce(comm, NULL, buf, n, DTCOMM_FLOAT32, DTCOMM_SUM));
        CHECK(dtcomm_barrier(comm));
        double t0 = now_us();
        for (int i = 0; i < iters[s]; i++)
            CHECK(dtcomm_all_reduce(comm, NULL, buf, n, DTCOMM_FLOAT32, DTCOMM_SUM));
        double per = (now_us() - t0) / iters[s];
        printf("BENCH rank %d bytes %zu iters %d us_per_call %.3f\n", rank, n * sizeof(float),
               iters[s], per);
        free(buf);
    }
}

int main(int argc, char **argv) {
    int major = 0, minor = 0, patch = 0;
    CHECK(dtcomm_version(&major, &minor, &patch));
    EXPECT(dtcomm_abi_version() == DTCOMM_ABI_VERSION, "ABI %d, header %d", dtcomm_abi_version(),
           DTCOMM_ABI_VERSION);

    dtcomm_comm_t comm = 0;
    CHECK(dtcomm_comm_init(&comm));
    int rank = -1, size = -1, local = -1;
    CHECK(dtcomm_comm_rank(comm, &rank));
    CHECK(dtcomm_comm_size(comm, &size));
    CHECK(dtcomm_comm_local_rank(comm, &local));

    if (argc > 3 && strcmp(argv[1], "--bench") == 0) {
        bench(comm, rank, atoi(argv[2]), atoi(argv[3]));
        CHECK(dtcomm_comm_destroy(comm));
        return 0;
    }

    /* In-place float32 sums over awkward counts. */
    const size_t counts[] = {0, 1, 7, 1000, (1 << 20) + 3};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        size_t n = counts[c];
        float *v = malloc((n + 1) * sizeof(float));
        for (size_t i = 0; i < n; i++) v[i] = (float)(rank + (int)(i % 7));
        CHECK(dtcomm_all_reduce(comm, NULL, v, n, DTCOMM_FLOAT32, DTCOMM_SUM));
        for (size_t i = 0; i < n; i++) {
            float want = (float)(size * (size - 1) / 2 + size * (int)(i % 7));
            EXPECT(v[i] == want, "count %zu elem %zu: %f != %f", n, i, v[i], want);
        }
        free(v);
    }

    /* Out of place, float64 average. */
    double in[5], out[5];
    for (int i = 0; i < 5; i++) in[i] = rank * 2.0 + i;
    CHECK(dtcomm_all_reduce(comm, in, out, 5, DTCOMM_FLOAT64, DTCOMM_AVG));
    for (int i = 0; i < 5; i++) EXPECT(out[i] == (size - 1) + i, "avg %d: %f", i, out[i]);

    /* Four non-blocking int32 allreduces in flight, then test and wait. */
    int32_t bufs[4][64];
    dtcomm_request_t reqs[4];
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 64; i++) bufs[k][i] = k * 100 + rank;
        CHECK(dtcomm_iall_reduce(comm, NULL, bufs[k], 64, DTCOMM_INT32, DTCOMM_MAX, &reqs[k]));
    }
    for (int k = 0; k < 4; k++) {
        CHECK(dtcomm_wait(reqs[k], 0));
        int done = 0;
        CHECK(dtcomm_test(reqs[k], &done));
        EXPECT(done == 1, "request %d not done after wait", k);
        CHECK(dtcomm_request_free(reqs[k]));
        for (int i = 0; i < 64; i++) EXPECT(bufs[k][i] == k * 100 + size - 1, "max %d", k);
    }

    /* all_gather, broadcast from the last rank, reduce_scatter. */
    int64_t mine[2] = {rank, rank * 10};
    int64_t *all = malloc(sizeof(int64_t) * 2 * size);
    CHECK(dtcomm_all_gather(comm, mine, all, 2, DTCOMM_INT64));
    for (int p = 0; p < size; p++) EXPECT(all[2 * p] == p && all[2 * p + 1] == 10 * p, "gather");
    uint8_t b[3] = {0, 0, 0};
    if (rank == size - 1) b[0] = 7, b[1] = 8, b[2] = 9;
    CHECK(dtcomm_broadcast(comm, NULL, b, 3, DTCOMM_UINT8, size - 1));
    EXPECT(b[0] == 7 && b[1] == 8 && b[2] == 9, "broadcast");
    float *rs_in = malloc(sizeof(float) * 3 * size);
    for (int i = 0; i < 3 * size; i++) rs_in[i] = (float)i;
    float rs_out[3];
    CHECK(dtcomm_reduce_scatter(comm, rs_in, rs_out, 3, DTCOMM_FLOAT32, DTCOMM_SUM));
    for (int i = 0; i < 3; i++) EXPECT(rs_out[i] == (float)(size * (3 * rank + i)), "rs %d", i);
    free(all);
    free(rs_in);

    /* complex64 (re, im pairs): sum and product; max is refused on every rank, naming it. */
    float z[4] = {(float)rank, 1.0f, 1.0f, 1.0f}; /* rank + i, 1 + i */
    CHECK(dtcomm_all_reduce(comm, NULL, z, 2, DTCOMM_COMPLEX64, DTCOMM_SUM));
    EXPECT(z[0] == (float)(size * (size - 1) / 2) && z[1] == (float)size, "complex sum");
    z[2] = 0.0f, z[3] = 1.0f; /* i^size */
    CHECK(dtcomm_all_reduce(comm, NULL, z + 2, 1, DTCOMM_COMPLEX64, DTCOMM_PROD));
    const float ire[4] = {1, 0, -1, 0}, iim[4] = {0, 1, 0, -1};
    EXPECT(z[2] == ire[size % 4] && z[3] == iim[size % 4], "i^%d: %f %f", size, z[2], z[3]);
    EXPECT(dtcomm_all_reduce(comm, NULL, z, 2, DTCOMM_COMPLEX64, DTCOMM_MAX) ==
               DTCOMM_INVALID_ARGUMENT, "complex max was not refused");
    EXPECT(strstr(dtcomm_last_error(), "max") && strstr(dtcomm_last_error(), "complex64"), "%s",
           dtcomm_last_error());

    /* bool xor over ranks, and a bitwise-and reduce of int32 to rank 0. */
    uint8_t flag[2] = {1, (uint8_t)(rank == 0)};
    CHECK(dtcomm_all_reduce(comm, NULL, flag, 2, DTCOMM_BOOL, DTCOMM_BXOR));
    EXPECT(flag[0] == (uint8_t)(size % 2) && flag[1] == 1, "bool xor %d %d", flag[0], flag[1]);
    int32_t bits = ~(1 << rank);
    CHECK(dtcomm_reduce(comm, NULL, &bits, 1, DTCOMM_INT32, DTCOMM_BAND, 0));
    if (rank == 0) EXPECT(bits == ~((1 << size) - 1), "band %d", bits);

    printf("ALLREDUCE OK rank %d of %d (local rank %d, dtcomm %d.%d.%d)\n", rank, size, local, major,
           minor, patch);
    CHECK(dtcomm_comm_destroy(comm));
    return 0;
}
