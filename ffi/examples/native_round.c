/*
 * A C program in a native rendezvous round: dtcomm_comm_init with DTCOMM_RDZV_ENDPOINT on
 * dt-rdzv's native port (and its fingerprint and token) gets its rank, world and peers from the
 * server; an allreduce runs over the round's links. Then the member that is not rank 0 exits
 * without a goodbye; the server ends the round, and rank 0's next call fails with
 * DTCOMM_ROUND_ENDED naming the lost rank (a call in flight at the loss fails with
 * DTCOMM_PEER_LOST from the links instead, whichever hears first). Prints "NATIVE OK rank R".
 */
#include "dtcomm.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void) {
    dtcomm_comm_t comm = 0;
    if (dtcomm_comm_init(&comm) != DTCOMM_SUCCESS) {
        fprintf(stderr, "init: %s\n", dtcomm_last_error());
        return 1;
    }
    int rank = 0, size = 0;
    dtcomm_comm_rank(comm, &rank);
    dtcomm_comm_size(comm, &size);
    double v = rank + 1;
    if (dtcomm_all_reduce(comm, NULL, &v, 1, DTCOMM_FLOAT64, DTCOMM_SUM) != DTCOMM_SUCCESS) {
        fprintf(stderr, "all_reduce: %s\n", dtcomm_last_error());
        return 1;
    }
    printf("SUM %g rank %d world %d\n", v, rank, size);
    fflush(stdout);
    if (rank != 0) {
        _exit(3); /* lost: no goodbye, no leave */
    }
    /* The server notices the loss (its heartbeats stop: 3 s in the test) and ends the round;
     * rank 0 makes no call meanwhile, so its links have not seen the loss themselves. */
    sleep(6);
    dtcomm_result_t r = dtcomm_barrier(comm);
    printf("after the loss: %s: %s\n", dtcomm_result_name(r), dtcomm_last_error());
    dtcomm_comm_destroy(comm);
    if (r != DTCOMM_ROUND_ENDED) return 1;
    printf("NATIVE OK rank %d\n", rank);
    return 0;
}
