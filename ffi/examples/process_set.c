/*
 * Horovod's process sets from C: every rank builds a communicator of the even ranks
 * (dtcomm_comm_subset, collective over the parent, built before any negotiator runs there),
 * its members start a negotiator on it and allreduce there, the parent keeps working; a list
 * that differs between ranks fails on every rank. Rank, world size and the rendezvous come from the
 * launcher's environment (as in allreduce.c):
 *
 *   DTCOMM_RANK=0 DTCOMM_WORLD_SIZE=3 DTCOMM_RDZV_ENDPOINT=host:29400 ./process_set
 */
#include "dtcomm.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

int main(void) {
    dtcomm_comm_t comm;
    CHECK(dtcomm_comm_init(&comm));
    int rank, world;
    CHECK(dtcomm_comm_rank(comm, &rank));
    CHECK(dtcomm_comm_size(comm, &world));

    /* The even ranks, in descending order: rank ranks[i] becomes rank i of the set. */
    int evens[64];
    int n = 0;
    for (int r = (world - 1) / 2 * 2; r >= 0; r -= 2) evens[n++] = r;
    dtcomm_comm_t set;
    CHECK(dtcomm_comm_subset(comm, evens, (size_t)n, &set));
    EXPECT((set != 0) == (rank % 2 == 0), "rank %d: set handle %llu", rank,
           (unsigned long long)set);

    if (set != 0) {
        int srank, ssize;
        CHECK(dtcomm_comm_rank(set, &srank));
        CHECK(dtcomm_comm_size(set, &ssize));
        EXPECT(ssize == n && evens[srank] == rank, "rank %d is %d of %d in the set", rank,
               srank, ssize);
        dtcomm_negotiator_t neg;
        CHECK(dtcomm_negotiator_start(set, 1.0, 64 << 20, &neg));
        const uint64_t shape[1] = {2};
        float v[2] = {(float)rank, 1.0f};
        dtcomm_named_t op;
        CHECK(dtcomm_named_allreduce(neg, "set.grad", DTCOMM_FLOAT32, shape, 1, v, DTCOMM_SUM,
                                     1.0, 1.0, &op));
        CHECK(dtcomm_named_wait(op));
        float got[2];
        size_t size = 0;
        CHECK(dtcomm_named_result(op, got, sizeof got, &size));
        float want = 0.0f;
        for (int i = 0; i < n; i++) want += (float)evens[i];
        EXPECT(got[0] == want && got[1] == (float)n, "set sum %g %g, want %g %d", got[0], got[1],
               want, n);
        CHECK(dtcomm_named_free(op));
        CHECK(dtcomm_negotiator_shutdown(neg));
        CHECK(dtcomm_comm_destroy(set));
    }

    /* The parent still works, for every rank. */
    float one = 1.0f, total = 0.0f;
    CHECK(dtcomm_all_reduce(comm, &one, &total, 1, DTCOMM_FLOAT32, DTCOMM_SUM));
    EXPECT(total == (float)world, "parent sum %g", total);

    /* Ranks that disagree about the list: every rank fails, and says which rank differs. */
    int mine[1] = {rank == 0 ? 0 : world - 1};
    dtcomm_comm_t bad = 12345;
    dtcomm_result_t r = dtcomm_comm_subset(comm, mine, 1, &bad);
    EXPECT(r != DTCOMM_SUCCESS, "a differing list was accepted");
    EXPECT(strstr(dtcomm_last_error(), "every rank must give the same list") != NULL, "%s",
           dtcomm_last_error());
    printf("SUBSET ERROR rank %d: %s\n", rank, dtcomm_last_error());

    CHECK(dtcomm_comm_destroy(comm));
    printf("PROCESS SET OK rank %d of %d\n", rank, world);
    return 0;
}
