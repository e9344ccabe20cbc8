/* Load the HIP stub globally, then dlopen each argument (RTLD_NOW);
 * exit 1 with dlerror() on failure. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  /* Some fixtures do not list libamdhip64.so.5 as NEEDED: provide it globally. */
  if (!dlopen("libamdhip64.so.5", RTLD_NOW | RTLD_GLOBAL)) {
    fprintf(stderr, "dlopen libamdhip64.so.5: %s\n", dlerror());
    return 1;
  }
  for (int i = 1; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "dlopen %s: %s\n", argv[i], dlerror());
      return 1;
    }
  }
  return 0;
}
