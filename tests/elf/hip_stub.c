/* Stub libamdhip64.so.5 for GPU-less load tests of split binaries.
 * Records every wrapper passed to __hipRegisterFatBinary in the file named
 * by ROCPACK_STUB_LOG: one line "magic=<4 chars> version=<n> index=<u32>
 * data=<hex>", where data is the first ROCPACK_STUB_LEN bytes (default 24)
 * the wrapper's binary pointer points at. Built with hip_stub.map so the
 * symbols carry the hip_4.2 version the fixtures were linked against. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fat_wrapper {
  uint32_t magic;
  uint32_t version;
  const unsigned char *binary;
  uint64_t reserved1;
};

static void **g_handle_storage[64];
static int g_count;

void **__hipRegisterFatBinary(const struct fat_wrapper *w) {
  const char *path = getenv("ROCPACK_STUB_LOG");
  const char *lenv = getenv("ROCPACK_STUB_LEN");
  size_t len = lenv ? (size_t)strtoul(lenv, NULL, 10) : 24;
  if (path) {
    FILE *f = fopen(path, "a");
    if (f) {
      char m[5];
      memcpy(m, &w->magic, 4);
      m[4] = 0;
      fprintf(f, "magic=%s version=%u index=%u data=", m, w->version,
              (unsigned)(w->reserved1 & 0xffffffffu));
      if (w->binary) {
        for (size_t i = 0; i < len; i++) fprintf(f, "%02x", w->binary[i]);
      } else {
        fprintf(f, "NULL");
      }
      fprintf(f, "\n");
      fclose(f);
    }
  }
  static void *dummy[64];
  if (g_count < 64) g_handle_storage[g_count] = &dummy[g_count];
  return (void **)&dummy[g_count < 64 ? g_count++ : 0];
}

void __hipUnregisterFatBinary(void **h) { (void)h; }
void __hipRegisterFunction(void **h, const void *f, char *a, const char *b, int c,
                           void *d, void *e, void *g, void *i, int *j) {
  (void)h; (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)i; (void)j;
}
void __hipRegisterVar(void **h, void *v, char *a, const char *b, int ext, size_t size,
                      int constant, int global) {
  (void)h; (void)v; (void)a; (void)b; (void)ext; (void)size; (void)constant; (void)global;
}
void __hipRegisterManagedVar(void *a, void **b, void *c, const char *d, size_t e, unsigned f) {
  (void)a; (void)b; (void)c; (void)d; (void)e; (void)f;
}
void __hipRegisterSurface(void) {}
void __hipRegisterTexture(void) {}
int __hipPushCallConfiguration(uint64_t g, uint32_t gz, uint64_t b, uint32_t bz, size_t s, void *st) {
  (void)g; (void)gz; (void)b; (void)bz; (void)s; (void)st;
  return 0;
}
int __hipPopCallConfiguration(void *g, void *b, size_t *s, void **st) {
  (void)g; (void)b; (void)s; (void)st;
  return 0;
}
int hipLaunchKernel(const void *f, uint64_t g, uint32_t gz, uint64_t b, uint32_t bz, void **args,
                    size_t shmem, void *stream) {
  (void)f; (void)g; (void)gz; (void)b; (void)bz; (void)args; (void)shmem; (void)stream;
  return 0;
}
