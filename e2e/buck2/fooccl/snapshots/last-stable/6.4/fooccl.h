/* fooccl: the consumer's own library, with its own prebuilt snapshots
 * (snapshots/, store/, stable_checksums.bzl with FOOCCL_* names). */
#ifndef FOOCCL_H
#define FOOCCL_H

#ifdef __cplusplus
extern "C" {
#endif

/* ROCm version the library was built for, e.g. "6.4". */
const char *fooccl_rocm_version(void);
/* Source commit the library was built from. */
const char *fooccl_commit(void);
/* The product of n values. */
long fooccl_all_reduce_prod(const long *values, int n);

#ifdef __cplusplus
}
#endif

#endif /* FOOCCL_H */
