/* Prints which fooccl and barccl it was linked against: each library's
 * channel comes from its own prebuilt_snapshot target, version and commit
 * from the library itself (source or prebuilt snapshot). */
#include <stdio.h>

#include "barccl.h"
#include "fooccl.h"


int main(void) {
    printf("fooccl channel=%s rocm=%s commit=%s\n", FOOCCL_SNAPSHOT_CHANNEL, fooccl_rocm_version(), fooccl_commit());
    printf("barccl channel=%s rocm=%s commit=%s\n", BARCCL_SNAPSHOT_CHANNEL, barccl_rocm_version(), barccl_commit());
    return 0;
}
