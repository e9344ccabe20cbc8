/* bench/runtime.sh's measuring program: librocm_kpack against plain reads.
 * Usage: runtime_bench ARCHIVE ARCH [MARKER HOST_BINARY]
 * Prints key=value lines: open_first_us (median of 25 fresh open + first
 * lookup + close), all_s (open, every kernel of ARCH, close; best of 9),
 * kernels, bytes, read_s (pread of the same number of bytes from the blob
 * region in kernel-sized reads into fresh buffers: the bytes-read baseline;
 * best of 9, interleaved with all_s). With MARKER (the split binary's
 * .rocm_kpack_ref bytes) and HOST_BINARY (its path, the archive installed
 * where the marker points), the HIP runtime's path too: cache_first_us
 * (median of 25 fresh caches: create + kpack_load_code_object #0 + destroy)
 * and cache_all_s (one fresh cache resolving every co_index; best of 9,
 * interleaved with the other two). */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rocm_kpack/kpack.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static unsigned char* slurp(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char* b = malloc(1 << 16);
  size_t n = fread(b, 1, 1 << 16, f);
  fclose(f);
  return n ? b : NULL;
}

/* runtime_bench steady MARKER HOST_BINARY N ROUNDS: one cache resolves
 * co_index 0..N-1 of HOST_BINARY once (first_pass_ms: opens the archive and
 * locates every frame), then ROUNDS more passes over them are timed
 * (steady_ns: ns per kpack_load_code_object + kpack_free_code_object, the
 * best of 5 repetitions). */
static int steady(int argc, char** argv) {
  if (argc != 6) return 2;
  unsigned char* marker = slurp(argv[2]);
  if (!marker) return 1;
  long n = atol(argv[4]), rounds = atol(argv[5]);
  const char* archs[2] = {"amdgcn-amd-amdhsa--gfx1100", "gfx11-generic"};
  kpack_cache_t c;
  if (kpack_cache_create(&c) != KPACK_SUCCESS) return 1;
  double t0 = now();
  for (long i = 0; i < n; i++) {
    void* co;
    size_t cs;
    kpack_error_t e = kpack_load_code_object(c, marker, argv[3], (uint32_t)i, archs, 2, &co, &cs);
    if (e != KPACK_SUCCESS) {
      fprintf(stderr, "co %ld: error %d\n", i, (int)e);
      return 1;
    }
    kpack_free_code_object(co);
  }
  double first = now() - t0, best = 1e9;
  for (int rep = 0; rep < 5; rep++) {
    t0 = now();
    for (long r = 0; r < rounds; r++)
      for (long i = 0; i < n; i++) {
        void* co;
        size_t cs;
        if (kpack_load_code_object(c, marker, argv[3], (uint32_t)i, archs, 2, &co, &cs) != KPACK_SUCCESS) return 1;
        kpack_free_code_object(co);
      }
    double t = now() - t0;
    if (t < best) best = t;
  }
  kpack_cache_destroy(c);
  printf("first_pass_ms=%.2f\nsteady_ns=%.0f\n", first * 1e3, best * 1e9 / (double)(n * rounds));
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "steady") == 0) return steady(argc, argv);
  if (argc != 3 && argc != 5) return 2;
  const char* path = argv[1];
  const char* arch = argv[2];
  double lat[25];
  for (int i = 0; i < 25; i++) {
    double t0 = now();
    kpack_archive_t a;
    if (kpack_open(path, &a) != KPACK_SUCCESS) return 1;
    const char* b;
    void* k;
    size_t ks;
    if (kpack_get_binary(a, 0, &b) != KPACK_SUCCESS) return 1;
    if (kpack_get_kernel(a, b, arch, &k, &ks) != KPACK_SUCCESS) return 1;
    kpack_free_kernel(k);
    kpack_close(a);
    lat[i] = now() - t0;
  }
  qsort(lat, 25, sizeof lat[0], cmp);

  /* Sizes of ARCH's kernels, for the baseline. */
  kpack_archive_t a;
  if (kpack_open(path, &a) != KPACK_SUCCESS) return 1;
  size_t n = 0, kernels = 0, bytes = 0;
  kpack_get_binary_count(a, &n);
  size_t* sizes = calloc(n ? n : 1, sizeof *sizes);
  for (size_t i = 0; i < n; i++) {
    const char* b;
    void* k;
    size_t ks;
    kpack_get_binary(a, i, &b);
    if (kpack_get_kernel(a, b, arch, &k, &ks) == KPACK_SUCCESS) {
      sizes[kernels++] = ks;
      bytes += ks;
      kpack_free_kernel(k);
    }
  }
  kpack_close(a);

  /* Best of 5, the measurements interleaved (archive API, pread baseline,
   * and with a marker the cache path). */
  unsigned char* marker = argc == 5 ? slurp(argv[3]) : NULL;
  if (argc == 5 && !marker) return 1;
  const char* archs[1] = {arch};
  double all = 1e9, rd = 1e9, call = 1e9;
  size_t cos = 0;
  int fd = open(path, O_RDONLY);
  for (int rep = 0; rep < 9; rep++) {
    if (marker) {
      double c0 = now();
      kpack_cache_t c;
      if (kpack_cache_create(&c) != KPACK_SUCCESS) return 1;
      cos = 0;
      for (uint32_t co_index = 0; co_index < n; co_index++) {
        void* co;
        size_t cs;
        kpack_error_t e = kpack_load_code_object(c, marker, argv[4], co_index, archs, 1, &co, &cs);
        if (e == KPACK_SUCCESS) {
          kpack_free_code_object(co);
          cos++;
        } else if (e != KPACK_ERROR_KERNEL_NOT_FOUND) {
          return 1;
        }
      }
      kpack_cache_destroy(c);
      double ct = now() - c0;
      call = ct < call ? ct : call;
    }
    double t0 = now();
    if (kpack_open(path, &a) != KPACK_SUCCESS) return 1;
    for (size_t i = 0; i < n; i++) {
      const char* b;
      void* k;
      size_t ks;
      kpack_get_binary(a, i, &b);
      if (kpack_get_kernel(a, b, arch, &k, &ks) == KPACK_SUCCESS) kpack_free_kernel(k);
    }
    kpack_close(a);
    double t = now() - t0;
    all = t < all ? t : all;

    t0 = now();
    off_t off = 64;
    for (size_t i = 0; i < kernels; i++) {
      /* a fresh buffer per kernel, as the API hands out */
      char* dst = malloc(sizes[i] ? sizes[i] : 1);
      if (pread(fd, dst, sizes[i], off) < 0) return 1;
      off += sizes[i];
      free(dst);
    }
    t = now() - t0;
    rd = t < rd ? t : rd;
  }
  close(fd);
  free(sizes);

  if (marker) {
    double clat[25];
    for (int i = 0; i < 25; i++) {
      double t0 = now();
      kpack_cache_t c;
      void* co;
      size_t cs;
      if (kpack_cache_create(&c) != KPACK_SUCCESS) return 1;
      if (kpack_load_code_object(c, marker, argv[4], 0, archs, 1, &co, &cs) != KPACK_SUCCESS) return 1;
      kpack_free_code_object(co);
      kpack_cache_destroy(c);
      clat[i] = now() - t0;
    }
    qsort(clat, 25, sizeof clat[0], cmp);
    free(marker);
    printf("cache_first_us=%.1f\ncache_all_s=%.4f\ncache_cos=%zu\n", clat[12] * 1e6, call, cos);
  }
  printf("open_first_us=%.1f\nall_s=%.4f\nkernels=%zu\nbytes=%zu\nread_s=%.4f\n", lat[12] * 1e6,
         all, kernels, bytes, rd);
  return 0;
}
