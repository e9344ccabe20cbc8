#include "barccl.h"

#ifndef BARCCL_ROCM_VERSION
#error "define BARCCL_ROCM_VERSION"
#endif
#ifndef BARCCL_COMMIT
#define BARCCL_COMMIT source
#endif
#define BARCCL_STR2(x) #x
#define BARCCL_STR(x) BARCCL_STR2(x)

const char *barccl_rocm_version(void) { return BARCCL_STR(BARCCL_ROCM_VERSION); }
const char *barccl_commit(void) { return BARCCL_STR(BARCCL_COMMIT); }
