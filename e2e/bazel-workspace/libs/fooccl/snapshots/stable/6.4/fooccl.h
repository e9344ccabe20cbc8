/* fooccl: a tiny prebuilt-snapshot library of the consumer workspace. */
#ifndef FOOCCL_H
#define FOOCCL_H
#ifdef __cplusplus
extern "C" {
#endif
/* ROCm version the library was built for, e.g. "6.4". */
const char *fooccl_rocm_version(void);
/* Source commit the library was built from ("source" for dev). */
const char *fooccl_commit(void);
#ifdef __cplusplus
}
#endif
#endif /* FOOCCL_H */
