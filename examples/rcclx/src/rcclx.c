#include "rcclx.h"

/* Set by the build: -DRCCLX_ROCM_VERSION=6.4 -DRCCLX_COMMIT=<hash>. */
#ifndef RCCLX_ROCM_VERSION
#error "define RCCLX_ROCM_VERSION"
#endif
#ifndef RCCLX_COMMIT
#define RCCLX_COMMIT source
#endif

#define RCCLX_STR2(x) #x
#define RCCLX_STR(x) RCCLX_STR2(x)

const char *rcclx_rocm_version(void) { return RCCLX_STR(RCCLX_ROCM_VERSION); }

const char *rcclx_commit(void) { return RCCLX_STR(RCCLX_COMMIT); }

long rcclx_all_reduce_sum(const long *values, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) s += values[i];
    return s;
}
