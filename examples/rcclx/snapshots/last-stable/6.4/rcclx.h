/* rcclx: a tiny stand-in for the RCCL-X communication library.
 * Built from source in the dev channel; stable / last-stable use prebuilt
 * snapshots of it (see BUILD.bazel and snapshots/). */
#ifndef RCCLX_H
#define RCCLX_H

#ifdef __cplusplus
extern "C" {
#endif

/* ROCm version the library was built for, e.g. "6.4". */
const char *rcclx_rocm_version(void);
/* Source commit the library was built from. */
const char *rcclx_commit(void);
/* A trivial "collective": the sum of n values. */
long rcclx_all_reduce_sum(const long *values, int n);

#ifdef __cplusplus
}
#endif

#endif /* RCCLX_H */
