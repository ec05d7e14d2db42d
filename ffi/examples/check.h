/*
 * CHECK and EXPECT for the C examples: a failing call prints its result name and
 * dtcomm_last_error(), a failing check its message, and the example exits 1.
 */
#ifndef DTCOMM_EXAMPLES_CHECK_H
#define DTCOMM_EXAMPLES_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "dtcomm.h"

#define CHECK(call)                                                                      \
    do {                                                                                 \
        dtcomm_result_t r_ = (call);                                                     \
        if (r_ != DTCOMM_SUCCESS) {                                                      \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,           \
                    dtcomm_result_name(r_), dtcomm_last_error());                        \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#define EXPECT(cond, ...)                                                                \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                \
            fprintf(stderr, "\n");                                                       \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

#endif
