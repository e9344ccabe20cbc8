/* rocpack librocm_kpack: symbol visibility. */
#ifndef ROCM_KPACK_KPACK_EXPORT_H
#define ROCM_KPACK_KPACK_EXPORT_H

#if defined(_WIN32)
#define KPACK_API __declspec(dllimport)
#else
#define KPACK_API __attribute__((visibility("default")))
#endif

#endif
