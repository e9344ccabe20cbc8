/* load_dlls.exe [--reserve HEXADDR] DLL... : LoadLibrary each DLL in turn.
 * --reserve takes the address range a DLL prefers, so the loader must rebase it. */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--reserve") == 0 && i + 1 < argc) {
      unsigned long long at = strtoull(argv[++i], NULL, 16);
      void *p = VirtualAlloc((void *)at, 0x200000, MEM_RESERVE, PAGE_NOACCESS);
      printf("reserved %llx: %s\n", at, p == (void *)at ? "ok" : "FAILED");
      continue;
    }
    HMODULE h = LoadLibraryA(argv[i]);
    if (!h) {
      printf("error: LoadLibrary(%s) failed: %lu\n", argv[i], GetLastError());
      return 2;
    }
    printf("loaded %s at %llx\n", argv[i], (unsigned long long)h);
  }
  fflush(stdout);
  return 0;
}
