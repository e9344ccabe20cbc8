/* The consumer's program: its own fooccl and rocpack's rcclx example
 * library, each in the channel chosen for it with -m (the aliases of this
 * project's root PACKAGE), and both built for one ROCm version. */
#include <stdio.h>

#include "fooccl.h"
#include "rcclx.h"


#ifndef FOOCCL_SNAPSHOT_CHANNEL
#error "FOOCCL_SNAPSHOT_CHANNEL comes from the fooccl rcclx_snapshot target"
#endif
#ifndef RCCLX_SNAPSHOT_CHANNEL
#error "RCCLX_SNAPSHOT_CHANNEL comes from the rcclx rcclx_snapshot target"
#endif

int main(void) {
    const long v[] = {1, 2, 3, 4};
    printf("consumer: fooccl channel=%s rocm=%s commit=%s prod=%ld\n", FOOCCL_SNAPSHOT_CHANNEL,
           fooccl_rocm_version(), fooccl_commit(), fooccl_all_reduce_prod(v, 4));
    printf("consumer: rcclx channel=%s rocm=%s commit=%s sum=%ld\n", RCCLX_SNAPSHOT_CHANNEL,
           rcclx_rocm_version(), rcclx_commit(), rcclx_all_reduce_sum(v, 3));
    return 0;
}
