// The public header from C++: every function has C linkage and the
// signature of ROCm's rocm_kpack/kpack.h (checked by assigning each to a
// pointer of the exact type), and the program links against the library.
#include <cstdio>

#include "rocm_kpack/kpack.h"

int main() {
  kpack_error_t (*open_fn)(const char*, kpack_archive_t*) = kpack_open;
  void (*close_fn)(kpack_archive_t) = kpack_close;
  kpack_error_t (*arch_count)(kpack_archive_t, size_t*) = kpack_get_architecture_count;
  kpack_error_t (*arch)(kpack_archive_t, size_t, const char**) = kpack_get_architecture;
  kpack_error_t (*bin_count)(kpack_archive_t, size_t*) = kpack_get_binary_count;
  kpack_error_t (*bin)(kpack_archive_t, size_t, const char**) = kpack_get_binary;
  kpack_error_t (*kernel)(kpack_archive_t, const char*, const char*, void**, size_t*) =
      kpack_get_kernel;
  void (*free_kernel)(void*) = kpack_free_kernel;
  kpack_error_t (*cache_create)(kpack_cache_t*) = kpack_cache_create;
  void (*cache_destroy)(kpack_cache_t) = kpack_cache_destroy;
  kpack_error_t (*discover)(const void*, char*, size_t, size_t*) = kpack_discover_binary_path;
  kpack_error_t (*load)(kpack_cache_t, const void*, const char*, uint32_t, const char* const*,
                        size_t, void**, size_t*) = kpack_load_code_object;
  void (*free_co)(void*) = kpack_free_code_object;
  kpack_error_t (*enumerate)(const char*, bool (*)(const char*, void*), void*) =
      kpack_enumerate_architectures;
  static_assert(KPACK_ERROR_ARCH_NOT_FOUND == 14, "error codes");
  static_assert(KPACK_COMPRESSION_ZSTD_PER_KERNEL == 1, "compression enum");
  static_assert(KPACK_CURRENT_VERSION == 1, "version");
  kpack_cache_t c = nullptr;
  if (cache_create(&c) != KPACK_SUCCESS) return 1;
  cache_destroy(c);
  kpack_archive_t a = nullptr;
  if (open_fn(nullptr, &a) != KPACK_ERROR_INVALID_ARGUMENT) return 1;
  (void)close_fn; (void)arch_count; (void)arch; (void)bin_count; (void)bin; (void)kernel;
  (void)free_kernel; (void)discover; (void)load; (void)free_co; (void)enumerate;
  std::puts("ok");
  return 0;
}
