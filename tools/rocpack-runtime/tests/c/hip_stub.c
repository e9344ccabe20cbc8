/* Stub libamdhip64.so.5 that resolves split binaries through librocm_kpack,
 * as a HIP runtime does: for each HIPK wrapper given to
 * __hipRegisterFatBinary it finds the binary (kpack_discover_binary_path),
 * loads code object `reserved1` for the arch in ROCPACK_STUB_ARCH through one
 * kpack cache, and writes it to $ROCPACK_STUB_OUT/<n>.co, logging
 * "<n> <co_index> <error> <size> <path>" lines to $ROCPACK_STUB_OUT/log.
 * Built with hip_stub.map (symbol version hip_4.2, as the fixtures expect). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rocm_kpack/kpack.h"

struct fat_wrapper {
  uint32_t magic;
  uint32_t version;
  const void* binary;
  uint64_t reserved1;
};

#define HIPK 0x4B504948u

static kpack_cache_t cache;
static int counter;
static void* dummy[256];

void** __hipRegisterFatBinary(const struct fat_wrapper* w) {
  const char* out = getenv("ROCPACK_STUB_OUT");
  const char* arch = getenv("ROCPACK_STUB_ARCH");
  int n = counter++;
  if (out && arch && w->magic == HIPK) {
    if (!cache) kpack_cache_create(&cache);
    char path[4096];
    size_t off = 0;
    void* co = NULL;
    size_t size = 0;
    kpack_error_t e = kpack_discover_binary_path(w->binary, path, sizeof path, &off);
    if (e == KPACK_SUCCESS) {
      const char* archs[1] = {arch};
      e = kpack_load_code_object(cache, w->binary, path, (uint32_t)w->reserved1, archs, 1, &co,
                                 &size);
    }
    char f[4200];
    snprintf(f, sizeof f, "%s/log", out);
    FILE* log = fopen(f, "a");
    if (log) {
      fprintf(log, "%d %llu %d %zu %s\n", n, (unsigned long long)w->reserved1, (int)e, size,
              e == KPACK_SUCCESS ? path : "-");
      fclose(log);
    }
    if (e == KPACK_SUCCESS) {
      snprintf(f, sizeof f, "%s/%d.co", out, n);
      FILE* c = fopen(f, "wb");
      if (c) {
        fwrite(co, 1, size, c);
        fclose(c);
      }
      kpack_free_code_object(co);
    }
  }
  return &dummy[n % 256];
}

void __hipUnregisterFatBinary(void** h) { (void)h; }
void __hipRegisterFunction(void** h, const void* f, char* a, const char* b, int c, void* d,
                           void* e, void* g, void* i, int* j) {
  (void)h; (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)i; (void)j;
}
void __hipRegisterVar(void** h, void* v, char* a, const char* b, int ext, size_t size,
                      int constant, int global) {
  (void)h; (void)v; (void)a; (void)b; (void)ext; (void)size; (void)constant; (void)global;
}
void __hipRegisterManagedVar(void* a, void** b, void* c, const char* d, size_t e, unsigned f) {
  (void)a; (void)b; (void)c; (void)d; (void)e; (void)f;
}
void __hipRegisterSurface(void) {}
void __hipRegisterTexture(void) {}
int __hipPushCallConfiguration(uint64_t g, uint32_t gz, uint64_t b, uint32_t bz, size_t s,
                               void* st) {
  (void)g; (void)gz; (void)b; (void)bz; (void)s; (void)st;
  return 0;
}
int __hipPopCallConfiguration(void* g, void* b, size_t* s, void** st) {
  (void)g; (void)b; (void)s; (void)st;
  return 0;
}
int hipLaunchKernel(const void* f, uint64_t g, uint32_t gz, uint64_t b, uint32_t bz, void** args,
                    size_t shmem, void* stream) {
  (void)f; (void)g; (void)gz; (void)b; (void)bz; (void)args; (void)shmem; (void)stream;
  return 0;
}
