/* Black-box test of librocm_kpack through its C header, linked shared or
 * static. Usage: abi_test MODE DIR
 *   api       every function and argument check, on the archives in DIR/golden
 *   load      kpack_load_code_object on the tree in DIR (see runtime_c.rs)
 *   disabled  ROCM_KPACK_DISABLE is on: loads return NOT_IMPLEMENTED
 *   archnf    ROCM_KPACK_PATH names an archive without the arch
 *   threads   8 threads x 500 lookups through one cache
 *   oom       a 64 MiB kernel under an address-space limit: OUT_OF_MEMORY
 *   envonce   the environment is read at cache creation, not per lookup
 *             (DISABLE, PATH and DEBUG; the driver checks nothing was printed)
 *   debug     a load with ROCM_KPACK_DEBUG set by the caller (the driver checks stderr)
 * Prints one line per failed check and "N passed, M failed" at the end. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rocm_kpack/kpack.h"

static int passed, failed;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (cond) {                                                       \
      passed++;                                                       \
    } else {                                                          \
      failed++;                                                       \
      printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);          \
    }                                                                 \
  } while (0)
#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    long long _a = (long long)(a), _b = (long long)(b);                        \
    if (_a == _b) {                                                            \
      passed++;                                                                \
    } else {                                                                   \
      failed++;                                                                \
      printf("FAIL %s:%d: %s == %s (%lld != %lld)\n", __FILE__, __LINE__, #a, \
             #b, _a, _b);                                                      \
    }                                                                          \
  } while (0)

static char dir[2048];

static char* path_in(const char* rel) {
  static char buf[8][4096];
  static int n;
  char* p = buf[n++ % 8];
  snprintf(p, 4096, "%s/%s", dir, rel);
  return p;
}

/* Whole file into a malloc buffer. */
static unsigned char* slurp(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* b = malloc(n > 0 ? n : 1);
  if (fread(b, 1, n, f) != (size_t)n) n = 0;
  fclose(f);
  *size = (size_t)n;
  return b;
}

static bool collect(const char* arch, void* user) {
  char* acc = user;
  strcat(acc, arch);
  strcat(acc, ";");
  return true;
}
static bool first_only(const char* arch, void* user) {
  (void)arch;
  (*(int*)user)++;
  return false;
}

static void api(void) {
  kpack_archive_t a = NULL;
  /* argument checks and reader errors */
  CHECK_EQ(kpack_open(NULL, &a), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_open(path_in("golden/test_noop.kpack"), NULL), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_open(path_in("missing.kpack"), &a), KPACK_ERROR_FILE_NOT_FOUND);
  CHECK_EQ(kpack_open(path_in("bad/empty.kpack"), &a), KPACK_ERROR_IO_ERROR);
  CHECK_EQ(kpack_open(path_in("bad/magic.kpack"), &a), KPACK_ERROR_INVALID_FORMAT);
  CHECK_EQ(kpack_open(path_in("bad/version.kpack"), &a), KPACK_ERROR_UNSUPPORTED_VERSION);
  CHECK_EQ(kpack_open(path_in("bad/toc.kpack"), &a), KPACK_ERROR_MSGPACK_PARSE_FAILED);
  /* A directory: ROCm fails reading its header (INVALID_FORMAT). */
  CHECK_EQ(kpack_open(path_in("bad"), &a), KPACK_ERROR_INVALID_FORMAT);
  kpack_close(NULL);

  /* test_noop.kpack (written by ROCm's rocm-kpack) */
  CHECK_EQ(kpack_open(path_in("golden/test_noop.kpack"), &a), KPACK_SUCCESS);
  size_t n = 99;
  CHECK_EQ(kpack_get_architecture_count(a, &n), KPACK_SUCCESS);
  CHECK_EQ(n, 2);
  CHECK_EQ(kpack_get_architecture_count(NULL, &n), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_get_architecture_count(a, NULL), KPACK_ERROR_INVALID_ARGUMENT);
  const char* s = NULL;
  CHECK_EQ(kpack_get_architecture(a, 0, &s), KPACK_SUCCESS);
  CHECK(s && strcmp(s, "gfx900") == 0);
  CHECK_EQ(kpack_get_architecture(a, 1, &s), KPACK_SUCCESS);
  CHECK(s && strcmp(s, "gfx906") == 0);
  CHECK_EQ(kpack_get_architecture(a, 2, &s), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_get_architecture(a, 0, NULL), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_get_binary_count(a, &n), KPACK_SUCCESS);
  CHECK_EQ(n, 2);
  CHECK_EQ(kpack_get_binary_count(NULL, &n), KPACK_ERROR_INVALID_ARGUMENT);
  const char* b0 = NULL;
  const char* b1 = NULL;
  CHECK_EQ(kpack_get_binary(a, 0, &b0), KPACK_SUCCESS);
  CHECK_EQ(kpack_get_binary(a, 1, &b1), KPACK_SUCCESS);
  CHECK(b0 && strcmp(b0, "bin/testapp#0") == 0);
  CHECK(b1 && strcmp(b1, "lib/libtest.so#0") == 0);
  CHECK_EQ(kpack_get_binary(a, 2, &b0), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_get_binary(NULL, 0, &b0), KPACK_ERROR_INVALID_ARGUMENT);

  /* scheme none: the kernel is the raw bytes at the blob start (offset 64) */
  void* k = NULL;
  size_t ks = 0;
  CHECK_EQ(kpack_get_kernel(a, "lib/libtest.so#0", "gfx900", &k, &ks), KPACK_SUCCESS);
  CHECK_EQ(ks, 119);
  size_t fsz = 0;
  unsigned char* raw = slurp(path_in("golden/test_noop.kpack"), &fsz);
  CHECK(raw && fsz > 64 + 119 && k && memcmp(k, raw + 64, 119) == 0);
  free(raw);
  void* k2 = NULL;
  CHECK_EQ(kpack_get_kernel(a, "lib/libtest.so#0", "gfx906", &k2, &ks), KPACK_SUCCESS);
  CHECK_EQ(ks, 219);
  /* the first copy stays valid after other calls */
  CHECK(k && ((unsigned char*)k)[0] == ((unsigned char*)k)[0]);
  kpack_free_kernel(k);
  kpack_free_kernel(k2);
  kpack_free_kernel(NULL);
  CHECK_EQ(kpack_get_kernel(a, "bin/testapp#0", "gfx906", &k, &ks), KPACK_ERROR_KERNEL_NOT_FOUND);
  CHECK_EQ(kpack_get_kernel(a, "nope#0", "gfx900", &k, &ks), KPACK_ERROR_KERNEL_NOT_FOUND);
  CHECK_EQ(kpack_get_kernel(a, NULL, "gfx900", &k, &ks), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_get_kernel(a, "bin/testapp#0", "gfx900", NULL, &ks), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_get_kernel(NULL, "bin/testapp#0", "gfx900", &k, &ks), KPACK_ERROR_INVALID_ARGUMENT);
  kpack_close(a);

  /* test_zstd.kpack: zstd-per-kernel */
  CHECK_EQ(kpack_open(path_in("golden/test_zstd.kpack"), &a), KPACK_SUCCESS);
  CHECK_EQ(kpack_get_kernel(a, "lib/libhip.so#0", "gfx1100", &k, &ks), KPACK_SUCCESS);
  CHECK_EQ(ks, 1019);
  size_t es = 0;
  unsigned char* expect = slurp(path_in("expect/libhip_gfx1100.bin"), &es);
  CHECK(expect && es == ks && memcmp(expect, k, ks) == 0);
  free(expect);
  kpack_free_kernel(k);
  CHECK_EQ(kpack_get_kernel(a, "lib/libhip.so#0", "gfx1101", &k, &ks), KPACK_SUCCESS);
  CHECK_EQ(ks, 619);
  kpack_free_kernel(k);
  kpack_close(a);

  /* a frame that passes the open-time checks but does not decode */
  CHECK_EQ(kpack_open(path_in("lib4/.kpack/x_gfx1100.kpack"), &a), KPACK_SUCCESS);
  k = NULL;
  CHECK_EQ(kpack_get_kernel(a, "lib/libhip.so#0", "gfx1100", &k, &ks), KPACK_ERROR_DECOMPRESSION_FAILED);
  CHECK(k == NULL);
  kpack_close(a);

  /* enumerate */
  char acc[256] = "";
  CHECK_EQ(kpack_enumerate_architectures(path_in("golden/test_zstd.kpack"), collect, acc), KPACK_SUCCESS);
  CHECK(strcmp(acc, "gfx1100;gfx1101;") == 0);
  int calls = 0;
  CHECK_EQ(kpack_enumerate_architectures(path_in("golden/test_noop.kpack"), first_only, &calls), KPACK_SUCCESS);
  CHECK_EQ(calls, 1);
  CHECK_EQ(kpack_enumerate_architectures(NULL, collect, acc), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_enumerate_architectures(path_in("golden/test_zstd.kpack"), NULL, acc), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_enumerate_architectures(path_in("missing.kpack"), collect, acc), KPACK_ERROR_FILE_NOT_FOUND);

  /* discover: this function lives in this executable (or the library, static) */
  char p[4096];
  size_t off = 0;
  CHECK_EQ(kpack_discover_binary_path((const void*)&api, p, sizeof p, &off), KPACK_SUCCESS);
  CHECK(strstr(p, "abi_test") != NULL);
  CHECK(off > 0);
  CHECK_EQ(kpack_discover_binary_path((const void*)&api, p, 2, &off), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_discover_binary_path(NULL, p, sizeof p, &off), KPACK_ERROR_INVALID_ARGUMENT);
  int on_stack = 0;
  CHECK_EQ(kpack_discover_binary_path(&on_stack, p, sizeof p, &off), KPACK_ERROR_PATH_DISCOVERY_FAILED);

  /* cache arguments */
  CHECK_EQ(kpack_cache_create(NULL), KPACK_ERROR_INVALID_ARGUMENT);
  kpack_cache_destroy(NULL);
}

static unsigned char* marker;
static size_t marker_size;

static kpack_error_t load(kpack_cache_t c, const char* bin, uint32_t co, const char* arch, size_t* size) {
  const char* archs[2] = {arch, "gfx11-generic"};
  void* out = NULL;
  kpack_error_t e = kpack_load_code_object(c, marker, path_in(bin), co, archs, 2, &out, size);
  if (e == KPACK_SUCCESS) kpack_free_code_object(out);
  return e;
}

static void load_tests(void) {
  kpack_cache_t c = NULL;
  CHECK_EQ(kpack_cache_create(&c), KPACK_SUCCESS);
  size_t size = 0;
  /* ISA name with features and prefix; the archive lists bare gfx1100 */
  CHECK_EQ(load(c, "lib/libhip.so", 0, "amdgcn-amd-amdhsa--gfx1100:sramecc+:xnack-", &size), KPACK_SUCCESS);
  CHECK_EQ(size, 1019);
  CHECK_EQ(load(c, "lib/libhip.so", 0, "gfx1101", &size), KPACK_SUCCESS);
  CHECK_EQ(size, 619);
  CHECK_EQ(load(c, "lib/libhip.so", 7, "gfx1100", &size), KPACK_ERROR_KERNEL_NOT_FOUND);
  CHECK_EQ(load(c, "lib/libhip.so", 0, "gfx942", &size), KPACK_ERROR_ARCHIVE_NOT_FOUND);
  /* fall-through: lib2's first archive lists gfx1100 but lacks the kernel */
  CHECK_EQ(load(c, "lib2/libhip.so", 0, "gfx1100", &size), KPACK_SUCCESS);
  CHECK_EQ(size, 1019);
  /* ... and past an archive whose frame does not decode (lib3) */
  CHECK_EQ(load(c, "lib3/libhip.so", 0, "gfx1100", &size), KPACK_SUCCESS);
  CHECK_EQ(size, 1019);
  /* lib4: that archive alone; its error is the last per-archive error */
  CHECK_EQ(load(c, "lib4/libhip.so", 0, "gfx1100", &size), KPACK_ERROR_DECOMPRESSION_FAILED);
  /* lib2 without the y archive's key: the last miss is KERNEL_NOT_FOUND */
  CHECK_EQ(load(c, "lib2/libhip.so", 3, "gfx1100", &size), KPACK_ERROR_KERNEL_NOT_FOUND);
  /* the arch list is searched in priority order: gfx942 has no archive,
   * gfx1101 (second) resolves */
  {
    const char* two[2] = {"gfx942", "gfx1101"};
    void* co = NULL;
    CHECK_EQ(kpack_load_code_object(c, marker, path_in("lib/libhip.so"), 0, two, 2, &co, &size), KPACK_SUCCESS);
    CHECK_EQ(size, 619);
    kpack_free_code_object(co);
  }
  /* argument and metadata checks */
  const char* archs[1] = {"gfx1100"};
  void* out = NULL;
  CHECK_EQ(kpack_load_code_object(c, marker, path_in("lib/libhip.so"), 0, archs, 0, &out, &size), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_load_code_object(NULL, marker, path_in("lib/libhip.so"), 0, archs, 1, &out, &size), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_load_code_object(c, NULL, path_in("lib/libhip.so"), 0, archs, 1, &out, &size), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_load_code_object(c, marker, NULL, 0, archs, 1, &out, &size), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_load_code_object(c, marker, path_in("lib/libhip.so"), 0, NULL, 1, &out, &size), KPACK_ERROR_INVALID_ARGUMENT);
  CHECK_EQ(kpack_load_code_object(c, marker, path_in("lib/libhip.so"), 0, archs, 1, NULL, &size), KPACK_ERROR_INVALID_ARGUMENT);
  static const unsigned char not_a_map[] = {0x2a};
  CHECK_EQ(kpack_load_code_object(c, not_a_map, path_in("lib/libhip.so"), 0, archs, 1, &out, &size), KPACK_ERROR_INVALID_METADATA);
  static const unsigned char no_paths[] = {0x81, 0xab, 'k', 'e', 'r', 'n', 'e', 'l', '_', 'n', 'a', 'm', 'e', 0xa1, 'x'};
  CHECK_EQ(kpack_load_code_object(c, no_paths, path_in("lib/libhip.so"), 0, archs, 1, &out, &size), KPACK_ERROR_INVALID_METADATA);
  kpack_cache_destroy(c);
}

static void disabled_tests(void) {
  kpack_cache_t c = NULL;
  CHECK_EQ(kpack_cache_create(&c), KPACK_SUCCESS);
  size_t size = 0;
  CHECK_EQ(load(c, "lib/libhip.so", 0, "gfx1100", &size), KPACK_ERROR_NOT_IMPLEMENTED);
  kpack_cache_destroy(c);
}

static void archnf_tests(void) {
  kpack_cache_t c = NULL;
  CHECK_EQ(kpack_cache_create(&c), KPACK_SUCCESS);
  size_t size = 0;
  CHECK_EQ(load(c, "lib/libhip.so", 0, "gfx942", &size), KPACK_ERROR_ARCH_NOT_FOUND);
  /* ROCM_KPACK_PATH replaces the marker paths: gfx1100 resolves through it */
  CHECK_EQ(load(c, "nowhere/libhip.so", 0, "gfx1100", &size), KPACK_SUCCESS);
  kpack_cache_destroy(c);
}

/* Current address-space size in bytes (/proc/self/statm, first field). */
static size_t vm_bytes(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f) {
    if (fscanf(f, "%lu", &pages) != 1) pages = 0;
    fclose(f);
  }
  return (size_t)pages * 4096;
}

static void oom_tests(void) {
  kpack_archive_t a = NULL;
  CHECK_EQ(kpack_open(path_in("big/none.kpack"), &a), KPACK_SUCCESS);
  struct rlimit old, lim;
  CHECK_EQ(getrlimit(RLIMIT_AS, &old), 0);
  lim = old;
  lim.rlim_cur = vm_bytes() + (16u << 20);
  CHECK_EQ(setrlimit(RLIMIT_AS, &lim), 0);
  void* k = NULL;
  size_t ks = 0;
  CHECK_EQ(kpack_get_kernel(a, "big#0", "gfx942", &k, &ks), KPACK_ERROR_OUT_OF_MEMORY);
  CHECK(k == NULL);
  CHECK_EQ(setrlimit(RLIMIT_AS, &old), 0);
  CHECK_EQ(kpack_get_kernel(a, "big#0", "gfx942", &k, &ks), KPACK_SUCCESS);
  CHECK_EQ(ks, 64u << 20);
  kpack_free_kernel(k);
  kpack_close(a);
}

static void envonce_tests(void) {
  kpack_cache_t before = NULL, after = NULL;
  size_t size = 0;
  CHECK(getenv("ROCM_KPACK_DISABLE") == NULL);
  CHECK_EQ(kpack_cache_create(&before), KPACK_SUCCESS);
  setenv("ROCM_KPACK_DISABLE", "1", 1);
  CHECK_EQ(load(before, "lib/libhip.so", 0, "gfx1100", &size), KPACK_SUCCESS);
  CHECK_EQ(kpack_cache_create(&after), KPACK_SUCCESS);
  CHECK_EQ(load(after, "lib/libhip.so", 0, "gfx1100", &size), KPACK_ERROR_NOT_IMPLEMENTED);
  unsetenv("ROCM_KPACK_DISABLE");
  CHECK_EQ(load(after, "lib/libhip.so", 0, "gfx1100", &size), KPACK_ERROR_NOT_IMPLEMENTED);
  CHECK_EQ(load(before, "lib/libhip.so", 0, "gfx1100", &size), KPACK_SUCCESS);
  /* ROCM_KPACK_PATH set after creation is not seen either */
  setenv("ROCM_KPACK_PATH", path_in("big/none.kpack"), 1); /* lists gfx942 only */
  CHECK_EQ(load(before, "lib/libhip.so", 0, "gfx1100", &size), KPACK_SUCCESS);
  CHECK_EQ(size, 1019);
  unsetenv("ROCM_KPACK_PATH");
  /* nor ROCM_KPACK_DEBUG: the driver checks that nothing was printed */
  setenv("ROCM_KPACK_DEBUG", "1", 1);
  CHECK_EQ(load(before, "lib/libhip.so", 0, "gfx1100", &size), KPACK_SUCCESS);
  CHECK_EQ(load(before, "lib/libhip.so", 0, "gfx942", &size), KPACK_ERROR_ARCHIVE_NOT_FOUND);
  unsetenv("ROCM_KPACK_DEBUG");
  kpack_cache_destroy(before);
  kpack_cache_destroy(after);
}

static void debug_tests(void) {
  kpack_cache_t c = NULL;
  size_t size = 0;
  CHECK_EQ(kpack_cache_create(&c), KPACK_SUCCESS);
  CHECK_EQ(load(c, "lib/libhip.so", 0, "gfx1100", &size), KPACK_SUCCESS);
  CHECK_EQ(load(c, "lib/libhip.so", 0, "gfx942", &size), KPACK_ERROR_ARCHIVE_NOT_FOUND);
  kpack_cache_destroy(c);
}

static kpack_cache_t shared_cache;
static int thread_errors;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void* worker(void* arg) {
  long id = (long)arg;
  int errors = 0;
  for (int i = 0; i < 500; i++) {
    size_t size = 0;
    const char* arch = ((i + id) % 2) ? "gfx1101" : "gfx1100";
    kpack_error_t e = load(shared_cache, "lib/libhip.so", 0, arch, &size);
    if (e != KPACK_SUCCESS || size != (((i + id) % 2) ? 619u : 1019u)) errors++;
  }
  pthread_mutex_lock(&mu);
  thread_errors += errors;
  pthread_mutex_unlock(&mu);
  return NULL;
}

static void thread_tests(void) {
  CHECK_EQ(kpack_cache_create(&shared_cache), KPACK_SUCCESS);
  pthread_t t[8];
  for (long i = 0; i < 8; i++) pthread_create(&t[i], NULL, worker, (void*)i);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  CHECK_EQ(thread_errors, 0);
  kpack_cache_destroy(shared_cache);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: abi_test MODE DIR\n");
    return 2;
  }
  snprintf(dir, sizeof dir, "%s", argv[2]);
  marker = slurp(path_in("marker.msgpack"), &marker_size);
  const char* mode = argv[1];
  if (strcmp(mode, "api") == 0) api();
  else if (strcmp(mode, "load") == 0) load_tests();
  else if (strcmp(mode, "disabled") == 0) disabled_tests();
  else if (strcmp(mode, "archnf") == 0) archnf_tests();
  else if (strcmp(mode, "threads") == 0) thread_tests();
  else if (strcmp(mode, "oom") == 0) oom_tests();
  else if (strcmp(mode, "envonce") == 0) envonce_tests();
  else if (strcmp(mode, "debug") == 0) debug_tests();
  else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  free(marker);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
