/* One side-by-side runtime case against one librocm_kpack, in its own
 * process: `harness LIB OPS` dlopens LIB (ROCm's C++ library or the
 * project's), runs the operations listed in the file OPS (one per line,
 * paths relative to the current directory) and prints one answer line per
 * operation. tools/rocpack-runtime/tests/side_by_side.rs writes the cases,
 * runs this once per library and compares the answers.
 *
 * Operations (tokens separated by one space; ARCHES is a comma list where
 * NULL stands for a NULL entry):
 *   setenv K V | unsetenv K      change the environment (before `cache`)
 *   cache                        destroy the cache (if any), create a new one
 *   load MARKER BIN CO ARCHES    kpack_load_code_object with MARKER's bytes
 *   loadedge MARKER BIN CO ARCHES  the same, the marker ending at a page
 *                                followed by an inaccessible page
 *   open PATH                    kpack_open, then every architecture, binary
 *                                and kernel (kpack_get_kernel), then close
 *   hold PATH | get BIN ARCH | release   one archive kept open across `sh`
 *   enum PATH                    kpack_enumerate_architectures
 *   sh COMMAND...                system(COMMAND) (prints nothing)
 *   rlimit_as MIB                setrlimit(RLIMIT_AS)
 *   deleted SO SYMBOL            dlopen SO, delete it, then
 *                                kpack_discover_binary_path(&SYMBOL)
 * A kernel is printed as its size and FNV-1a 64 hash. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

typedef int (*open_fn)(const char *, void **);
typedef void (*close_fn)(void *);
typedef int (*count_fn)(void *, size_t *);
typedef int (*item_fn)(void *, size_t, const char **);
typedef int (*kernel_fn)(void *, const char *, const char *, void **, size_t *);
typedef void (*free_fn)(void *);
typedef int (*cache_create_fn)(void **);
typedef void (*cache_destroy_fn)(void *);
typedef int (*load_fn)(void *, const void *, const char *, uint32_t, const char *const *, size_t,
                       void **, size_t *);
typedef int (*discover_fn)(const void *, char *, size_t, size_t *);
typedef bool (*arch_cb)(const char *, void *);
typedef int (*enum_fn)(const char *, arch_cb, void *);

static struct {
    open_fn open;
    close_fn close;
    count_fn arch_count, binary_count;
    item_fn arch, binary;
    kernel_fn get_kernel;
    free_fn free_kernel, free_code_object;
    cache_create_fn cache_create;
    cache_destroy_fn cache_destroy;
    load_fn load;
    discover_fn discover;
    enum_fn enumerate;
} K;

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "harness: %s missing: %s\n", name, dlerror());
        exit(3);
    }
    return p;
}

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static void print_blob(int rc, void *data, size_t size) {
    if (rc == 0)
        printf(" rc=0 size=%zu fnv=%016llx", size, (unsigned long long)fnv(data, size));
    else
        printf(" rc=%d", rc);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "harness: cannot read %s\n", path);
        exit(3);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) exit(3);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void dump_archive(void *a) {
    size_t na = 0, nb = 0;
    K.arch_count(a, &na);
    K.binary_count(a, &nb);
    printf(" arches=");
    for (size_t i = 0; i < na; i++) {
        const char *s = NULL;
        K.arch(a, i, &s);
        printf("%s%s", i ? "," : "", s ? s : "(null)");
    }
    printf(" binaries=");
    for (size_t i = 0; i < nb; i++) {
        const char *s = NULL;
        K.binary(a, i, &s);
        printf("%s%s", i ? "," : "", s ? s : "(null)");
    }
    for (size_t i = 0; i < nb; i++) {
        for (size_t j = 0; j < na; j++) {
            const char *b = NULL, *t = NULL;
            void *data = NULL;
            size_t size = 0;
            K.binary(a, i, &b);
            K.arch(a, j, &t);
            int rc = K.get_kernel(a, b, t, &data, &size);
            printf(" | %s@%s", b, t);
            print_blob(rc, data, size);
            if (rc == 0) K.free_kernel(data);
        }
    }
}

static bool print_arch(const char *arch, void *user) {
    (void)user;
    printf(" %s", arch);
    return true;
}

/* ARCHES: comma list, NULL for a NULL entry. */
static size_t parse_arches(char *s, const char **out, size_t cap) {
    size_t n = 0;
    for (char *t = strtok(s, ","); t && n < cap; t = strtok(NULL, ","))
        out[n++] = strcmp(t, "NULL") == 0 ? NULL : t;
    return n;
}

static void do_load(void *cache, char *args, bool edge) {
    char *marker = strtok(args, " "), *bin = strtok(NULL, " "), *co = strtok(NULL, " ");
    char *arches = strtok(NULL, " ");
    if (!marker || !bin || !co || !arches) exit(3);
    static const char *list[256];
    size_t n = parse_arches(arches, list, 256);
    size_t len = 0;
    char *bytes = read_file(marker, &len);
    const void *meta = bytes;
    if (edge) {
        long page = sysconf(_SC_PAGESIZE);
        size_t span = ((len + (size_t)page - 1) / (size_t)page + 1) * (size_t)page;
        char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) exit(3);
        mprotect(m + span - (size_t)page, (size_t)page, PROT_NONE);
        char *at = m + span - (size_t)page - len;
        memcpy(at, bytes, len);
        meta = at;
    }
    void *co_out = NULL;
    size_t size = 0;
    int rc = K.load(cache, meta, bin, (uint32_t)strtoul(co, NULL, 10), list, n, &co_out, &size);
    print_blob(rc, co_out, size);
    if (rc == 0) K.free_code_object(co_out);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: harness LIB OPS\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "harness: %s\n", dlerror());
        return 3;
    }
    K.open = (open_fn)sym(lib, "kpack_open");
    K.close = (close_fn)sym(lib, "kpack_close");
    K.arch_count = (count_fn)sym(lib, "kpack_get_architecture_count");
    K.binary_count = (count_fn)sym(lib, "kpack_get_binary_count");
    K.arch = (item_fn)sym(lib, "kpack_get_architecture");
    K.binary = (item_fn)sym(lib, "kpack_get_binary");
    K.get_kernel = (kernel_fn)sym(lib, "kpack_get_kernel");
    K.free_kernel = (free_fn)sym(lib, "kpack_free_kernel");
    K.free_code_object = (free_fn)sym(lib, "kpack_free_code_object");
    K.cache_create = (cache_create_fn)sym(lib, "kpack_cache_create");
    K.cache_destroy = (cache_destroy_fn)sym(lib, "kpack_cache_destroy");
    K.load = (load_fn)sym(lib, "kpack_load_code_object");
    K.discover = (discover_fn)sym(lib, "kpack_discover_binary_path");
    K.enumerate = (enum_fn)sym(lib, "kpack_enumerate_architectures");

    size_t oplen = 0;
    char *ops = read_file(argv[2], &oplen);
    ops = realloc(ops, oplen + 1);
    ops[oplen] = 0;
    void *cache = NULL, *held = NULL;
    char *save = NULL;
    for (char *line = strtok_r(ops, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *sp = strchr(line, ' ');
        char *args = sp ? sp + 1 : line + strlen(line);
        size_t oplen_ = sp ? (size_t)(sp - line) : strlen(line);
        char op[32] = {0};
        memcpy(op, line, oplen_ < 31 ? oplen_ : 31);
        if (!strcmp(op, "sh")) {
            fflush(stdout);
            if (system(args) != 0) {
                fprintf(stderr, "harness: sh failed: %s\n", args);
                return 3;
            }
            continue;
        }
        printf("%s", line);
        if (!strcmp(op, "setenv")) {
            char *k = strtok(args, " "), *v = strtok(NULL, "");
            setenv(k, v ? v : "", 1);
        } else if (!strcmp(op, "unsetenv")) {
            unsetenv(args);
        } else if (!strcmp(op, "cache")) {
            if (cache) K.cache_destroy(cache);
            cache = NULL;
            printf(" rc=%d", K.cache_create(&cache));
        } else if (!strcmp(op, "load") || !strcmp(op, "loadedge")) {
            do_load(cache, args, op[4] == 'e');
        } else if (!strcmp(op, "open")) {
            void *a = NULL;
            int rc = K.open(args, &a);
            printf(" rc=%d", rc);
            if (rc == 0) {
                dump_archive(a);
                K.close(a);
            }
        } else if (!strcmp(op, "hold")) {
            printf(" rc=%d", K.open(args, &held));
        } else if (!strcmp(op, "get")) {
            char *b = strtok(args, " "), *t = strtok(NULL, " ");
            void *data = NULL;
            size_t size = 0;
            int rc = K.get_kernel(held, b, t, &data, &size);
            print_blob(rc, data, size);
            if (rc == 0) K.free_kernel(data);
        } else if (!strcmp(op, "release")) {
            K.close(held);
            held = NULL;
        } else if (!strcmp(op, "enum")) {
            printf(" ->");
            int rc = K.enumerate(args, print_arch, NULL);
            printf(" rc=%d", rc);
        } else if (!strcmp(op, "rlimit_as")) {
            struct rlimit r;
            r.rlim_cur = r.rlim_max = (rlim_t)strtoull(args, NULL, 10) << 20;
            if (setrlimit(RLIMIT_AS, &r) != 0) return 3;
        } else if (!strcmp(op, "deleted")) {
            char *so = strtok(args, " "), *name = strtok(NULL, " ");
            char cwd[4096], path[8192];
            void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
            if (!h || !getcwd(cwd, sizeof cwd)) return 3;
            unlink(so);
            size_t off = 0;
            int rc = K.discover(dlsym(h, name), path, sizeof path, &off);
            printf(" rc=%d", rc);
            if (rc == 0) {
                size_t n = strlen(cwd);
                printf(" path=%s", strncmp(path, cwd, n) == 0 ? path + n : path);
            }
        } else {
            fprintf(stderr, "harness: unknown operation %s\n", op);
            return 2;
        }
        printf("\n");
        fflush(stdout);
    }
    if (cache) K.cache_destroy(cache);
    return 0;
}
