/* Prints which rcclx it was linked against: the channel comes from the
 * rcclx_snapshot target that was selected, version and commit from the
 * library itself (compiled from source, or a prebuilt snapshot). */
#include <stdio.h>

#include "rcclx.h"


#ifndef RCCLX_SNAPSHOT_CHANNEL
#error "RCCLX_SNAPSHOT_CHANNEL comes from the rcclx_snapshot target"
#endif

int main(void) {
    const long v[] = {1, 2, 3};
    printf("rcclx channel=%s rocm=%s commit=%s sum=%ld\n", RCCLX_SNAPSHOT_CHANNEL,
           rcclx_rocm_version(), rcclx_commit(), rcclx_all_reduce_sum(v, 3));
    return 0;
}
