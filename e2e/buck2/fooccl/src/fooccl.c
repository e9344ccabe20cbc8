#include "fooccl.h"

/* Set by the build: -DFOOCCL_ROCM_VERSION=6.4 -DFOOCCL_COMMIT=<hash>. */
#ifndef FOOCCL_ROCM_VERSION
#error "define FOOCCL_ROCM_VERSION"
#endif
#ifndef FOOCCL_COMMIT
#define FOOCCL_COMMIT source
#endif

#define FOOCCL_STR2(x) #x
#define FOOCCL_STR(x) FOOCCL_STR2(x)

const char *fooccl_rocm_version(void) { return FOOCCL_STR(FOOCCL_ROCM_VERSION); }

const char *fooccl_commit(void) { return FOOCCL_STR(FOOCCL_COMMIT); }

long fooccl_all_reduce_prod(const long *values, int n) {
    long p = 1;
    for (int i = 0; i < n; i++) p *= values[i];
    return p;
}
