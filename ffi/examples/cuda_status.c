/*
 * dtcomm_cuda_status: whether this process can use a GPU, as JSON. Asks the size first, then
 * retries while the buffer is too small (each call probes again, so the size can change).
 * Needs no launcher environment. Prints the JSON and "CUDA STATUS OK".
 */
#include "dtcomm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    size_t needed = 0;
    dtcomm_result_t rc = dtcomm_cuda_status(NULL, 0, &needed);
    if (rc != DTCOMM_INVALID_ARGUMENT || needed < 2) {
        fprintf(stderr, "size query: got %s (%d), needed %zu\n", dtcomm_result_name(rc), rc, needed);
        return 1;
    }
    char *buf = NULL;
    for (int attempt = 0; attempt < 3; attempt++) {
        free(buf);
        buf = malloc(needed);
        if (!buf) return 1;
        rc = dtcomm_cuda_status(buf, needed, &needed);
        if (rc != DTCOMM_INVALID_ARGUMENT) break;
    }
    if (rc != DTCOMM_SUCCESS) {
        fprintf(stderr, "dtcomm_cuda_status: %s: %s\n", dtcomm_result_name(rc), dtcomm_last_error());
        return 1;
    }
    printf("%s\n", buf);
    if (strncmp(buf, "{\"usable\":", 10) != 0 || !strstr(buf, "\"nccl\":{\"found\":")) {
        fprintf(stderr, "unexpected JSON\n");
        return 1;
    }
    rc = dtcomm_cuda_status(NULL, 7, NULL);
    if (rc != DTCOMM_INVALID_ARGUMENT || !strstr(dtcomm_last_error(), "buf is NULL")) {
        fprintf(stderr, "NULL buffer with a length: got %s: %s\n", dtcomm_result_name(rc),
                dtcomm_last_error());
        return 1;
    }
    free(buf);
    printf("CUDA STATUS OK\n");
    return 0;
}
