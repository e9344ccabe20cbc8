/* A C consumer of librocm_kpack, built by Bazel (//examples/runtime) and
 * Buck2 (examples/runtime/BUCK) against rocpack's runtime library target.
 *
 *   kpack_consumer KPACK HOST FAT ARCH
 *
 * KPACK  a .kpack archive made by the rules' kpack_split
 * HOST   the split host binary of the same split (carries .rocm_kpack_ref)
 * FAT    the original fat binary the split was made from
 * ARCH   a GPU architecture the archive holds, e.g. gfx1100
 *
 * Every code object the archive holds for ARCH is fetched twice, through
 * kpack_get_kernel and through kpack_load_code_object (the HIP runtime's
 * path: the marker read from HOST, the cache, ROCM_KPACK_PATH), and compared
 * byte for byte with the code object of the same wrapper in FAT, read here
 * from FAT's clang offload bundles (an oracle independent of rocpack).
 * Exit 0: all identical; 1: a difference or an unexpected error code;
 * 2: usage or unreadable input.
 */
#define _GNU_SOURCE /* memmem */
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rocm_kpack/kpack.h>

#define BUNDLE_MAGIC "__CLANG_OFFLOAD_BUNDLE__"
#define BUNDLE_MAGIC_LEN 24
#define MAX_BUNDLES 64

static int failures;

static void fail(const char* what, const char* detail) {
    fprintf(stderr, "kpack_consumer: FAILED: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    failures++;
}

static unsigned char* read_file(const char* path, size_t* size) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        perror(path);
        exit(2);
    }
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        perror(path);
        exit(2);
    }
    unsigned char* buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "kpack_consumer: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static uint64_t le64(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* The code object for triple "hipv4-amdgcn-amd-amdhsa--ARCH" in the
 * index-th uncompressed clang offload bundle of FAT (file order, which is
 * the wrappers' co_index order). NULL when absent. */
static const unsigned char* bundle_entry(const unsigned char* fat, size_t fat_size, unsigned index,
                                         const char* arch, size_t* size) {
    char triple[128];
    snprintf(triple, sizeof triple, "hipv4-amdgcn-amd-amdhsa--%s", arch);
    size_t at = 0;
    unsigned seen = 0;
    while (at + BUNDLE_MAGIC_LEN + 8 <= fat_size) {
        const unsigned char* m = memmem(fat + at, fat_size - at, BUNDLE_MAGIC, BUNDLE_MAGIC_LEN);
        if (!m) return NULL;
        size_t start = (size_t)(m - fat);
        at = start + BUNDLE_MAGIC_LEN;
        if (seen++ != index) continue;
        if (at + 8 > fat_size) return NULL;
        uint64_t n = le64(fat + at);
        size_t p = at + 8;
        for (uint64_t i = 0; i < n && p + 24 <= fat_size; i++) {
            uint64_t off = le64(fat + p), sz = le64(fat + p + 8), tlen = le64(fat + p + 16);
            p += 24;
            if (tlen > fat_size - p) return NULL;
            int match = tlen == strlen(triple) && memcmp(fat + p, triple, tlen) == 0;
            p += tlen;
            if (match) {
                if (off > fat_size - start || sz > fat_size - start - off) return NULL;
                *size = sz;
                return fat + start + off;
            }
        }
        return NULL;
    }
    return NULL;
}

static unsigned bundle_count(const unsigned char* fat, size_t fat_size) {
    unsigned n = 0;
    size_t at = 0;
    const unsigned char* m;
    while (at < fat_size && (m = memmem(fat + at, fat_size - at, BUNDLE_MAGIC, BUNDLE_MAGIC_LEN))) {
        n++;
        at = (size_t)(m - fat) + BUNDLE_MAGIC_LEN;
    }
    return n;
}

/* The bytes of section .rocm_kpack_ref of an ELF64 little-endian file. */
static const unsigned char* marker_of(const unsigned char* elf, size_t size) {
    if (size < sizeof(Elf64_Ehdr) || memcmp(elf, ELFMAG, SELFMAG) != 0 || elf[EI_CLASS] != ELFCLASS64) return NULL;
    Elf64_Ehdr eh;
    memcpy(&eh, elf, sizeof eh);
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > size ||
        (size - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum || eh.e_shstrndx >= eh.e_shnum)
        return NULL;
    Elf64_Shdr names;
    memcpy(&names, elf + eh.e_shoff + (size_t)eh.e_shstrndx * sizeof(Elf64_Shdr), sizeof names);
    if (names.sh_offset > size || names.sh_size > size - names.sh_offset) return NULL;
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;
        memcpy(&sh, elf + eh.e_shoff + (size_t)i * sizeof(Elf64_Shdr), sizeof sh);
        const char* want = ".rocm_kpack_ref";
        if (sh.sh_name >= names.sh_size || names.sh_size - sh.sh_name <= strlen(want)) continue;
        if (strcmp((const char*)elf + names.sh_offset + sh.sh_name, want) != 0) continue;
        if (sh.sh_type != SHT_PROGBITS || sh.sh_offset > size || sh.sh_size > size - sh.sh_offset) return NULL;
        return elf + sh.sh_offset;
    }
    return NULL;
}

struct arch_seen {
    const char* want;
    int count, seen;
};

static bool on_arch(const char* arch, void* user_data) {
    struct arch_seen* s = user_data;
    s->count++;
    s->seen |= strcmp(arch, s->want) == 0;
    return true;
}

static void compare(const char* what, const char* key, const void* got, size_t got_size, const unsigned char* want,
                    size_t want_size) {
    char detail[512];
    if (!want) {
        snprintf(detail, sizeof detail, "%s: the fat binary has no code object for it", key);
        fail(what, detail);
    } else if (got_size != want_size || memcmp(got, want, want_size) != 0) {
        snprintf(detail, sizeof detail, "%s: %zu bytes, the fat binary's code object has %zu (or other bytes)", key,
                 got_size, want_size);
        fail(what, detail);
    }
}

int main(int argc, char** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: kpack_consumer KPACK HOST FAT ARCH\n");
        return 2;
    }
    const char *kpack = argv[1], *host = argv[2], *fat_path = argv[3], *arch = argv[4];
    size_t fat_size, host_size;
    unsigned char* fat = read_file(fat_path, &fat_size);
    unsigned char* host_bytes = read_file(host, &host_size);
    unsigned bundles = bundle_count(fat, fat_size);
    if (bundles == 0 || bundles > MAX_BUNDLES) {
        fprintf(stderr, "kpack_consumer: %s has %u offload bundles\n", fat_path, bundles);
        return 2;
    }

    /* kpack_enumerate_architectures: ARCH is listed. */
    struct arch_seen seen = {arch, 0, 0};
    if (kpack_enumerate_architectures(kpack, on_arch, &seen) != KPACK_SUCCESS || !seen.seen)
        fail("kpack_enumerate_architectures does not list", arch);

    /* kpack_open + kpack_get_kernel for every binary key. */
    kpack_archive_t archive = NULL;
    kpack_error_t err = kpack_open(kpack, &archive);
    if (err != KPACK_SUCCESS) {
        fprintf(stderr, "kpack_consumer: kpack_open(%s) = %d\n", kpack, (int)err);
        return 1;
    }
    size_t n_arch = 0, n_bin = 0;
    int listed = 0;
    kpack_get_architecture_count(archive, &n_arch);
    for (size_t i = 0; i < n_arch; i++) {
        const char* a = NULL;
        if (kpack_get_architecture(archive, i, &a) == KPACK_SUCCESS && strcmp(a, arch) == 0) listed = 1;
    }
    if (!listed) fail("kpack_get_architecture: archive does not list", arch);
    kpack_get_binary_count(archive, &n_bin);
    unsigned by_get_kernel = 0;
    for (size_t i = 0; i < n_bin; i++) {
        const char* key = NULL;
        if (kpack_get_binary(archive, i, &key) != KPACK_SUCCESS) {
            fail("kpack_get_binary", NULL);
            continue;
        }
        const char* hash = strrchr(key, '#');
        unsigned co_index = hash ? (unsigned)strtoul(hash + 1, NULL, 10) : 0;
        void* data = NULL;
        size_t size = 0;
        err = kpack_get_kernel(archive, key, arch, &data, &size);
        if (err != KPACK_SUCCESS) {
            char d[512];
            snprintf(d, sizeof d, "%s: error %d", key, (int)err);
            fail("kpack_get_kernel", d);
            continue;
        }
        size_t want_size = 0;
        const unsigned char* want = bundle_entry(fat, fat_size, co_index, arch, &want_size);
        compare("kpack_get_kernel", key, data, size, want, want_size);
        by_get_kernel++;
        kpack_free_kernel(data);
    }
    /* An arch the archive lacks is KERNEL_NOT_FOUND, not some other bytes. */
    if (n_bin > 0) {
        const char* key = NULL;
        void* data = NULL;
        size_t size = 0;
        kpack_get_binary(archive, 0, &key);
        err = kpack_get_kernel(archive, key, "gfx0000", &data, &size);
        if (err != KPACK_ERROR_KERNEL_NOT_FOUND) fail("kpack_get_kernel of gfx0000 did not return KERNEL_NOT_FOUND", NULL);
    }
    kpack_close(archive);

    /* The HIP runtime's path: marker + cache + kpack_load_code_object. */
    const unsigned char* marker = marker_of(host_bytes, host_size);
    if (!marker) {
        fprintf(stderr, "kpack_consumer: %s has no .rocm_kpack_ref section\n", host);
        return 1;
    }
    if (setenv("ROCM_KPACK_PATH", kpack, 1) != 0) return 2;
    kpack_cache_t cache = NULL;
    if (kpack_cache_create(&cache) != KPACK_SUCCESS) {
        fail("kpack_cache_create", NULL);
        return 1;
    }
    const char* arch_list[] = {arch};
    unsigned by_load = 0;
    for (unsigned co = 0; co < bundles; co++) {
        void* code = NULL;
        size_t size = 0;
        char key[64];
        snprintf(key, sizeof key, "co_index %u", co);
        err = kpack_load_code_object(cache, marker, host, co, arch_list, 1, &code, &size);
        if (err != KPACK_SUCCESS) {
            char d[128];
            snprintf(d, sizeof d, "%s: error %d", key, (int)err);
            fail("kpack_load_code_object", d);
            continue;
        }
        size_t want_size = 0;
        const unsigned char* want = bundle_entry(fat, fat_size, co, arch, &want_size);
        compare("kpack_load_code_object", key, code, size, want, want_size);
        by_load++;
        kpack_free_code_object(code);
    }
    kpack_cache_destroy(cache);
    free(fat);
    free(host_bytes);

    if (by_get_kernel == 0 || by_load != bundles) fail("too few code objects compared", NULL);
    if (failures) return 1;
    printf("kpack_consumer: %s: %u code objects via kpack_get_kernel and %u via kpack_load_code_object, "
           "identical to %s's\n",
           arch, by_get_kernel, by_load, fat_path);
    return 0;
}
