/*
 * dtcomm_comm_destroy while another thread is blocked in a call on the communicator: the call
 * fails with DTCOMM_INTERRUPTED within a fraction of a second and destroy returns, instead of
 * both waiting for the call's deadline (DTCOMM_TIMEOUT, 30 s in the test). Rank 1 never enters
 * the call. Run under a launcher environment like allreduce.c; prints
 * "DESTROY OK rank R took S" at the end.
 */
#include "dtcomm.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static dtcomm_comm_t comm;
static dtcomm_result_t blocked_result = -1;
static char blocked_message[512];

static void *blocked(void *arg) {
    (void)arg;
    float v[4] = {1, 2, 3, 4};
    blocked_result = dtcomm_all_reduce(comm, NULL, v, 4, DTCOMM_FLOAT32, DTCOMM_SUM);
    snprintf(blocked_message, sizeof blocked_message, "%s", dtcomm_last_error());
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void) {
    if (dtcomm_comm_init(&comm) != DTCOMM_SUCCESS) {
        fprintf(stderr, "init: %s\n", dtcomm_last_error());
        return 1;
    }
    int rank = 0;
    dtcomm_comm_rank(comm, &rank);
    double took = 0;
    if (rank == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, blocked, NULL) != 0) return 1;
        usleep(500 * 1000);
        double t0 = now();
        dtcomm_result_t d = dtcomm_comm_destroy(comm);
        took = now() - t0;
        pthread_join(t, NULL);
        printf("destroy: %s in %.3f s; the blocked call: %s: %s\n", dtcomm_result_name(d), took,
               dtcomm_result_name(blocked_result), blocked_message);
        if (d != DTCOMM_SUCCESS || blocked_result != DTCOMM_INTERRUPTED || took > 5.0) return 1;
    } else {
        /* Up, linked and silent while rank 0 destroys its communicator. */
        usleep(3000 * 1000);
        dtcomm_comm_destroy(comm);
    }
    printf("DESTROY OK rank %d took %.3f\n", rank, took);
    return 0;
}
