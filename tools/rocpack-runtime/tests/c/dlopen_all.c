/* Load the HIP stub globally, then dlopen each argument; exit 1 on failure. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (!dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_GLOBAL)) {
    fprintf(stderr, "dlopen libamdhip64.so.5: %s\n", dlerror());
    return 1;
  }
  for (int i = 1; i < argc; i++) {
    if (!dlopen(argv[i], RTLD_NOW | RTLD_LOCAL)) {
      fprintf(stderr, "dlopen %s: %s\n", argv[i], dlerror());
      return 1;
    }
  }
  return 0;
}
