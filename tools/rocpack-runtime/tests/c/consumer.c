/* A minimal consumer of librocm_kpack (README's recipe, the installed
 * pkg-config and CMake packages): opens the archive given as argv[1] and
 * prints its architectures; "ok" and exit 0 when it has at least one. */
#include <rocm_kpack/kpack.h>
#include <stdio.h>

static bool print_arch(const char *arch, void *n) {
  printf("%s\n", arch);
  ++*(int *)n;
  return true;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  kpack_cache_t cache = NULL;
  if (kpack_cache_create(&cache) != KPACK_SUCCESS) return 1;
  int n = 0;
  kpack_error_t rc = kpack_enumerate_architectures(argv[1], print_arch, &n);
  kpack_cache_destroy(cache);
  if (rc != KPACK_SUCCESS || n == 0) {
    printf("error %d\n", (int)rc);
    return 1;
  }
  printf("ok\n");
  return 0;
}
