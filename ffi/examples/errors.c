/*
 * Every error path of dtcomm's C ABI, each answered with a result code and a message, never a
 * crash or a hang: NULL pointers, unknown dtype and op codes, counts that overflow, counts that
 * disagree with themselves, bad roots and peers, requests waited twice or freed twice, a forked
 * child, calls after destroy -- and a count mismatched across ranks, which fails every rank with
 * a message naming both ranks and both calls. Run under a launcher environment like
 * allreduce.c; prints "ERRORS OK rank R" at the end.
 */
#include "dtcomm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures = 0;

/* The call must return `want`, and its message must contain `needle` (if not NULL). */
static void expect(const char *what, dtcomm_result_t got, dtcomm_result_t want, const char *needle) {
    const char *msg = dtcomm_last_error();
    if (got != want || (needle && !strstr(msg, needle))) {
        fprintf(stderr, "FAIL %s: got %s (%d) want %s; message: %s; wanted in it: %s\n", what,
                dtcomm_result_name(got), got, dtcomm_result_name(want), msg,
                needle ? needle : "-");
        failures++;
    } else {
        printf("ok %s: %s: %s\n", what, dtcomm_result_name(got), got == DTCOMM_SUCCESS ? "" : msg);
    }
}

int main(void) {
    dtcomm_comm_t comm = 0;
    expect("init with NULL", dtcomm_comm_init(NULL), DTCOMM_INVALID_ARGUMENT, "comm is NULL");
    expect("init_rank out of range", dtcomm_comm_init_rank(&comm, 3, 2, NULL, NULL),
           DTCOMM_INVALID_ARGUMENT, "rank 3 is not in a world of 2");
    expect("init", dtcomm_comm_init(&comm), DTCOMM_SUCCESS, NULL);
    if (failures) return 1;
    int rank = 0, size = 0;
    dtcomm_comm_rank(comm, &rank);
    dtcomm_comm_size(comm, &size);
    float v[4] = {1, 2, 3, 4};
    size_t big = SIZE_MAX / 2;

    expect("rank into NULL", dtcomm_comm_rank(comm, NULL), DTCOMM_INVALID_ARGUMENT, "NULL");
    expect("unknown communicator", dtcomm_barrier(424242), DTCOMM_INVALID_ARGUMENT,
           "not a live communicator");
    expect("NULL recv", dtcomm_all_reduce(comm, NULL, NULL, 4, DTCOMM_FLOAT32, DTCOMM_SUM),
           DTCOMM_INVALID_ARGUMENT, "null pointer");
    expect("unknown dtype", dtcomm_all_reduce(comm, NULL, v, 4, 99, DTCOMM_SUM),
           DTCOMM_INVALID_ARGUMENT, "unknown dtype 99");
    expect("unknown op", dtcomm_all_reduce(comm, NULL, v, 4, DTCOMM_FLOAT32, 42),
           DTCOMM_INVALID_ARGUMENT, "unknown reduction 42");
    expect("count overflow", dtcomm_all_reduce(comm, NULL, v, big, DTCOMM_FLOAT64, DTCOMM_SUM),
           DTCOMM_INVALID_ARGUMENT, "overflow");
    expect("gather count overflow", dtcomm_all_gather(comm, v, v, big, DTCOMM_FLOAT32),
           DTCOMM_INVALID_ARGUMENT, "overflow");
    expect("root out of range", dtcomm_broadcast(comm, NULL, v, 4, DTCOMM_FLOAT32, size),
           DTCOMM_INVALID_ARGUMENT, "root");
    expect("negative root", dtcomm_broadcast(comm, NULL, v, 4, DTCOMM_FLOAT32, -1),
           DTCOMM_INVALID_ARGUMENT, "negative");
    expect("send to self", dtcomm_send(comm, v, 4, DTCOMM_FLOAT32, rank), DTCOMM_INVALID_ARGUMENT,
           "peer");
    size_t *sc = calloc(size, sizeof(size_t)), *rc = calloc(size, sizeof(size_t));
    sc[rank] = 1; /* sends itself 1 element but receives 0: counts disagree */
    expect("all_to_all_v counts disagree",
           dtcomm_all_to_all_v(comm, v, sc, v, rc, DTCOMM_FLOAT32), DTCOMM_INVALID_ARGUMENT,
           "sends itself 1");
    expect("all_to_all_v NULL counts", dtcomm_all_to_all_v(comm, v, NULL, v, rc, DTCOMM_FLOAT32),
           DTCOMM_INVALID_ARGUMENT, "sendcounts is NULL");
    expect("i* with NULL request",
           dtcomm_iall_reduce(comm, NULL, v, 4, DTCOMM_FLOAT32, DTCOMM_SUM, NULL),
           DTCOMM_INVALID_ARGUMENT, "request is NULL");

    /* Requests: waited twice (same result), freed twice, waited after free, bad test. */
    dtcomm_request_t req = 0;
    expect("ibarrier", dtcomm_ibarrier(comm, &req), DTCOMM_SUCCESS, NULL);
    expect("wait", dtcomm_wait(req, 30.0), DTCOMM_SUCCESS, NULL);
    expect("wait again", dtcomm_wait(req, 0), DTCOMM_SUCCESS, NULL);
    expect("test into NULL", dtcomm_test(req, NULL), DTCOMM_INVALID_ARGUMENT, "done is NULL");
    expect("free", dtcomm_request_free(req), DTCOMM_SUCCESS, NULL);
    expect("free again", dtcomm_request_free(req), DTCOMM_INVALID_ARGUMENT, "not a live request");
    expect("wait after free", dtcomm_wait(req, 1.0), DTCOMM_INVALID_ARGUMENT, "not a live request");

    /* After all that the communicator works: nothing was sent. */
    float ones[3] = {1, 1, 1};
    expect("allreduce still works", dtcomm_all_reduce(comm, NULL, ones, 3, DTCOMM_FLOAT32, DTCOMM_SUM),
           DTCOMM_SUCCESS, NULL);
    if (ones[0] != (float)size) {
        fprintf(stderr, "FAIL allreduce result %f\n", ones[0]);
        failures++;
    }

    /* A forked child cannot use the parent's communicator: an error, not a hang. */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dtcomm_result_t r = dtcomm_all_reduce(comm, NULL, ones, 3, DTCOMM_FLOAT32, DTCOMM_SUM);
        _exit(r == DTCOMM_SHUTDOWN && strstr(dtcomm_last_error(), "fork") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    expect("forked child refused", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? DTCOMM_SUCCESS
                                                                                 : DTCOMM_INTERNAL,
           DTCOMM_SUCCESS, NULL);
    expect("parent still works after the fork", dtcomm_barrier(comm), DTCOMM_SUCCESS, NULL);

    /* A count mismatched across ranks: rank 1 passes 4 elements, everyone else 3. Every rank
       fails; the message names rank 1 and both calls (and the rank that saw it: a bystander may
       compare with rank 1 itself, or be told by rank 0). */
    float m[4] = {0, 0, 0, 0};
    dtcomm_result_t r = dtcomm_all_reduce(comm, NULL, m, rank == 1 ? 4 : 3, DTCOMM_FLOAT32,
                                          DTCOMM_SUM);
    const char *msg = dtcomm_last_error();
    int names = strstr(msg, "rank 1") && strstr(msg, "float x 3") && strstr(msg, "float x 4");
    if ((rank <= 1 && r != DTCOMM_MISMATCH) || r == DTCOMM_SUCCESS || !names) {
        fprintf(stderr, "FAIL mismatch on rank %d: %s: %s\n", rank, dtcomm_result_name(r), msg);
        failures++;
    } else {
        printf("MISMATCH OK rank %d %s: %s\n", rank, dtcomm_result_name(r), msg);
    }
    expect("later calls say the communicator failed", dtcomm_barrier(comm), DTCOMM_FAILED, NULL);

    expect("destroy", dtcomm_comm_destroy(comm), DTCOMM_SUCCESS, NULL);
    expect("destroy again", dtcomm_comm_destroy(comm), DTCOMM_INVALID_ARGUMENT,
           "not a live communicator");
    expect("call after destroy", dtcomm_barrier(comm), DTCOMM_INVALID_ARGUMENT,
           "not a live communicator");
    free(sc);
    free(rc);
    if (failures) {
        fprintf(stderr, "%d failure(s) on rank %d\n", failures, rank);
        return 1;
    }
    printf("ERRORS OK rank %d\n", rank);
    return 0;
}
