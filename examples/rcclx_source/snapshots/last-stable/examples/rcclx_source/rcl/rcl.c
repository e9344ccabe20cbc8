#include "examples/rcclx_source/rcl/rcl.h"

#include "examples/rcclx_source/rcl/core/version.h"

const char *rcl_version(void) { return RCL_VERSION; }
