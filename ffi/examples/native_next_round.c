/*
 * A C program that joins a native rendezvous round whose membership changes while it is
 * being set up (a member takes the welcome and leaves before linking): dtcomm_comm_init takes
 * the next round, as Python's dtcomm.init() does, instead of failing. An allreduce then runs
 * over the round it took. Prints "NEXT ROUND OK rank R world W sum S".
 */
#include "dtcomm.h"

#include <stdio.h>

int main(void) {
    dtcomm_comm_t comm = 0;
    if (dtcomm_comm_init(&comm) != DTCOMM_SUCCESS) {
        fprintf(stderr, "init: %s\n", dtcomm_last_error());
        return 1;
    }
    int rank = 0, size = 0;
    dtcomm_comm_rank(comm, &rank);
    dtcomm_comm_size(comm, &size);
    double v = 1.0;
    if (dtcomm_all_reduce(comm, NULL, &v, 1, DTCOMM_FLOAT64, DTCOMM_SUM) != DTCOMM_SUCCESS) {
        fprintf(stderr, "all_reduce: %s\n", dtcomm_last_error());
        return 1;
    }
    printf("NEXT ROUND OK rank %d world %d sum %g\n", rank, size, v);
    dtcomm_comm_destroy(comm);
    return 0;
}
