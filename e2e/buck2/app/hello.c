/* The consumer's program: rocpack's rcclx example library, in the channel and
 * ROCm version chosen with -m in this project (the aliases of its PACKAGE). */
#include <stdio.h>

#include "rcclx.h"

#define STR2(x) #x
#define STR(x) STR2(x)

#ifndef RCCLX_SNAPSHOT_CHANNEL
#error "RCCLX_SNAPSHOT_CHANNEL comes from the rcclx_snapshot target"
#endif

int main(void) {
    const long v[] = {1, 2, 3};
    printf("consumer: rcclx channel=%s rocm=%s commit=%s sum=%ld\n", STR(RCCLX_SNAPSHOT_CHANNEL),
           rcclx_rocm_version(), rcclx_commit(), rcclx_all_reduce_sum(v, 3));
    return 0;
}
