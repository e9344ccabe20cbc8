/* rocpack librocm_kpack: the kpack runtime C interface (ABI of ROCm's
 * librocm_kpack.so.0). Semantics and limits: docs/runtime.md. */
#ifndef ROCM_KPACK_KPACK_H
#define ROCM_KPACK_KPACK_H

#include "rocm_kpack/kpack_export.h"
#include "rocm_kpack/kpack_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Open (memory-map and validate) an archive; close it with kpack_close. */
KPACK_API kpack_error_t kpack_open(const char* path, kpack_archive_t* archive);
/* Close an archive; NULL is a no-op. Strings it returned become invalid. */
KPACK_API void kpack_close(kpack_archive_t archive);

KPACK_API kpack_error_t kpack_get_architecture_count(kpack_archive_t archive, size_t* count);
/* *arch is owned by the archive and valid until kpack_close. */
KPACK_API kpack_error_t kpack_get_architecture(kpack_archive_t archive, size_t index,
                                               const char** arch);
KPACK_API kpack_error_t kpack_get_binary_count(kpack_archive_t archive, size_t* count);
/* Binaries in sorted order; *binary is owned by the archive until kpack_close. */
KPACK_API kpack_error_t kpack_get_binary(kpack_archive_t archive, size_t index,
                                         const char** binary);

/* A copy of the code object; free it with kpack_free_kernel. */
KPACK_API kpack_error_t kpack_get_kernel(kpack_archive_t archive, const char* binary_name,
                                         const char* arch, void** kernel_data,
                                         size_t* kernel_size);
KPACK_API void kpack_free_kernel(void* kernel_data);

/* Reads ROCM_KPACK_PATH, ROCM_KPACK_PATH_PREFIX, ROCM_KPACK_DISABLE and
 * ROCM_KPACK_DEBUG once. Thread-safe after creation. */
KPACK_API kpack_error_t kpack_cache_create(kpack_cache_t* cache);
KPACK_API void kpack_cache_destroy(kpack_cache_t cache);

/* The file mapped at an address (/proc/self/maps) and the address's offset in it. */
KPACK_API kpack_error_t kpack_discover_binary_path(const void* address_in_binary, char* path_out,
                                                   size_t path_out_size, size_t* offset_out);

/* Resolve wrapper co_index of a binary whose marker (.rocm_kpack_ref) bytes
 * are at hipk_metadata; free the result with kpack_free_code_object. */
KPACK_API kpack_error_t kpack_load_code_object(kpack_cache_t cache, const void* hipk_metadata,
                                               const char* binary_path, uint32_t co_index,
                                               const char* const* arch_list, size_t arch_count,
                                               void** code_object_out,
                                               size_t* code_object_size_out);
KPACK_API void kpack_free_code_object(void* code_object);

/* Calls callback(arch, user_data) per architecture until it returns false. */
KPACK_API kpack_error_t kpack_enumerate_architectures(const char* archive_path,
                                                      bool (*callback)(const char* arch,
                                                                       void* user_data),
                                                      void* user_data);

#ifdef __cplusplus
}
#endif

#endif
