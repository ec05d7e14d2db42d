/*
 * Horovod's model from C: named operations, submitted by each rank in its own order, complete
 * once every rank submitted them; small allreduces are fused; a name the ranks disagree about
 * fails on every rank with DTCOMM_MISMATCH and the next one works. Rank, world size and the
 * rendezvous come from the launcher's environment (as in allreduce.c):
 *
 *   DTCOMM_RANK=0 DTCOMM_WORLD_SIZE=2 DTCOMM_RDZV_ENDPOINT=host:29400 ./negotiate
 */
#include "dtcomm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define NAMES 6

int main(void) {
    dtcomm_comm_t comm;
    CHECK(dtcomm_comm_init(&comm));
    int rank, world;
    CHECK(dtcomm_comm_rank(comm, &rank));
    CHECK(dtcomm_comm_size(comm, &world));
    dtcomm_negotiator_t neg;
    CHECK(dtcomm_negotiator_start(comm, 1.0, 64 << 20, &neg));

    /* Six allreduces of 3 floats, each rank submitting them in a rotated order. */
    dtcomm_named_t ops[NAMES];
    const uint64_t shape[1] = {3};
    for (int k = 0; k < NAMES; k++) {
        int i = (k + 2 * rank) % NAMES;
        char name[32];
        snprintf(name, sizeof name, "grad.%d", i);
        float v[3] = {(float)(rank + 1), (float)i, 1.0f};
        CHECK(dtcomm_named_allreduce(neg, name, DTCOMM_FLOAT32, shape, 1, v, DTCOMM_SUM, 1.0,
                                     0.5, &ops[i]));
    }
    float sum_ranks = (float)world * (float)(world + 1) / 2.0f;
    for (int i = 0; i < NAMES; i++) {
        CHECK(dtcomm_named_wait(ops[i]));
        float got[3];
        size_t size = 0;
        CHECK(dtcomm_named_result(ops[i], got, sizeof got, &size));
        EXPECT(size == sizeof got, "size %zu", size);
        /* postscale 0.5 */
        EXPECT(got[0] == sum_ranks * 0.5f && got[1] == (float)(i * world) * 0.5f &&
                   got[2] == (float)world * 0.5f,
               "grad.%d: %g %g %g", i, got[0], got[1], got[2]);
        CHECK(dtcomm_named_free(ops[i]));
    }

    /* Allgather with a first dimension of rank + 1 rows of 2 int32. */
    {
        uint64_t gshape[2] = {(uint64_t)rank + 1, 2};
        int32_t mine[2 * 64];
        for (int j = 0; j < 2 * (rank + 1); j++) mine[j] = rank * 100 + j;
        dtcomm_named_t g;
        CHECK(dtcomm_named_allgather(neg, "rows", DTCOMM_INT32, gshape, 2, mine, &g));
        CHECK(dtcomm_named_wait(g));
        size_t size = 0;
        dtcomm_result_t r = dtcomm_named_result(g, NULL, 0, &size);
        EXPECT(r == DTCOMM_INVALID_ARGUMENT, "a NULL buffer only tells the size");
        size_t rows = (size_t)world * (size_t)(world + 1) / 2;
        EXPECT(size == rows * 2 * sizeof(int32_t), "size %zu for %zu rows", size, rows);
        int32_t *all = malloc(size);
        CHECK(dtcomm_named_result(g, all, size, &size));
        uint64_t counts[64];
        size_t n = 0;
        CHECK(dtcomm_named_counts(g, counts, 64, &n));
        EXPECT(n == (size_t)world, "%zu counts", n);
        size_t at = 0;
        for (int p = 0; p < world; p++) {
            EXPECT(counts[p] == (uint64_t)(2 * (p + 1)), "count of rank %d: %llu", p,
                   (unsigned long long)counts[p]);
            for (int j = 0; j < 2 * (p + 1); j++, at++)
                EXPECT(all[at] == p * 100 + j, "element %zu: %d", at, all[at]);
        }
        free(all);
        CHECK(dtcomm_named_free(g));
    }

    /* Broadcast from the last rank. */
    {
        double v[2] = {(double)rank, 7.0 * rank};
        const uint64_t bshape[1] = {2};
        dtcomm_named_t b;
        CHECK(dtcomm_named_broadcast(neg, "params", DTCOMM_FLOAT64, bshape, 1, v, world - 1, &b));
        CHECK(dtcomm_named_wait(b));
        size_t size;
        CHECK(dtcomm_named_result(b, v, sizeof v, &size));
        EXPECT(v[0] == world - 1 && v[1] == 7.0 * (world - 1), "%g %g", v[0], v[1]);
        CHECK(dtcomm_named_free(b));
    }

    /* In place (Horovod's allreduce_async_ and broadcast_): the buffers are lent, not copied,
     * and hold the results once the operations complete; the results report 0 bytes. */
    {
        float v[3] = {(float)(rank + 1), 2.0f, 0.0f};
        int64_t w[2] = {rank, 3 * rank + 1};
        const uint64_t wshape[1] = {2};
        dtcomm_named_t a, b;
        CHECK(dtcomm_named_allreduce_inplace(neg, "lent", DTCOMM_FLOAT32, shape, 1, v, DTCOMM_SUM,
                                             1.0, 1.0, &a));
        CHECK(dtcomm_named_broadcast_inplace(neg, "lent", DTCOMM_INT64, wshape, 1, w, world - 1,
                                             &b));
        CHECK(dtcomm_named_wait(a));
        CHECK(dtcomm_named_wait(b));
        EXPECT(v[0] == sum_ranks && v[1] == 2.0f * (float)world && v[2] == 0.0f, "%g %g %g", v[0],
               v[1], v[2]);
        EXPECT(w[0] == world - 1 && w[1] == 3 * (world - 1) + 1, "%lld %lld", (long long)w[0],
               (long long)w[1]);
        float unused;
        size_t size = 99;
        CHECK(dtcomm_named_result(a, &unused, sizeof unused, &size));
        EXPECT(size == 0, "an in-place result reports %zu bytes", size);
        CHECK(dtcomm_named_free(a));
        CHECK(dtcomm_named_free(b));
    }

    /* A name the ranks disagree about (rank 0 sends 4 elements, the others 3): every rank
     * gets DTCOMM_MISMATCH naming the ranks, and the next name works. */
    {
        float v[4] = {1, 1, 1, 1};
        const uint64_t mshape[1] = {rank == 0 ? 4u : 3u};
        dtcomm_named_t m;
        CHECK(dtcomm_named_allreduce(neg, "bad", DTCOMM_FLOAT32, mshape, 1, v, DTCOMM_SUM, 1.0,
                                     1.0, &m));
        dtcomm_result_t r = dtcomm_named_wait(m);
        EXPECT(r == DTCOMM_MISMATCH, "%s: %s", dtcomm_result_name(r), dtcomm_last_error());
        EXPECT(strstr(dtcomm_last_error(), "allreduce.bad") != NULL, "%s", dtcomm_last_error());
        CHECK(dtcomm_named_free(m));
        dtcomm_named_t bar;
        CHECK(dtcomm_named_barrier(neg, "after", &bar));
        CHECK(dtcomm_named_wait(bar));
        CHECK(dtcomm_named_free(bar));
    }

    /* A freed handle is an error, never a crash. */
    {
        dtcomm_result_t r = dtcomm_named_wait(ops[0]);
        EXPECT(r == DTCOMM_INVALID_ARGUMENT, "%s", dtcomm_result_name(r));
    }

    CHECK(dtcomm_negotiator_shutdown(neg));
    CHECK(dtcomm_comm_destroy(comm));
    printf("NEGOTIATE OK rank %d of %d\n", rank, world);
    return 0;
}
