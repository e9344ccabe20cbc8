/* barccl: a tiny prebuilt-snapshot library of the consumer workspace. */
#ifndef BARCCL_H
#define BARCCL_H
#ifdef __cplusplus
extern "C" {
#endif
/* ROCm version the library was built for, e.g. "6.4". */
const char *barccl_rocm_version(void);
/* Source commit the library was built from ("source" for dev). */
const char *barccl_commit(void);
#ifdef __cplusplus
}
#endif
#endif /* BARCCL_H */
