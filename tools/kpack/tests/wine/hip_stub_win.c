/* Stub amdhip64.dll for Wine tests: __hipRegisterFatBinary reports each
 * wrapper after the Windows loader has mapped (and maybe rebased) the image,
 * follows its pointer and checks that it lands in the image's .kpackrf
 * section (read from the headers as mapped in memory). One line per wrapper:
 *   reg base=B preferred=P wrapper_rva=R magic=M version=V ptr_rva=Q
 *       co_index=C in_kpackrf=0|1 data=HEX
 * (data: up to 1024 bytes at the pointer, within the mapped section).
 */
#include <windows.h>
#include <stdio.h>

struct wrapper { unsigned magic, version; const unsigned char *binary; unsigned long long reserved1; };
static void *handles[256];
static int nhandles;

__declspec(dllexport) void **__hipRegisterFatBinary(const struct wrapper *w) {
  HMODULE mod = NULL;
  GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                     (LPCSTR)w, &mod);
  const unsigned char *base = (const unsigned char *)mod;
  const IMAGE_NT_HEADERS64 *nt = (const IMAGE_NT_HEADERS64 *)(base + ((const IMAGE_DOS_HEADER *)base)->e_lfanew);
  const IMAGE_SECTION_HEADER *s = IMAGE_FIRST_SECTION(nt);
  unsigned long long ptr_rva = (unsigned long long)(w->binary - base);
  int in_kpackrf = 0;
  unsigned long long avail = 0;
  for (int i = 0; i < nt->FileHeader.NumberOfSections; i++) {
    unsigned long long a = s[i].VirtualAddress, n = s[i].Misc.VirtualSize;
    if (ptr_rva >= a && ptr_rva < a + n) {
      in_kpackrf = memcmp(s[i].Name, ".kpackrf", 8) == 0;
      avail = a + n - ptr_rva;
    }
  }
  printf("reg base=%llx preferred=%llx wrapper_rva=%llx magic=%08x version=%u ptr_rva=%llx co_index=%u in_kpackrf=%d data=",
         (unsigned long long)base, (unsigned long long)nt->OptionalHeader.ImageBase,
         (unsigned long long)((const unsigned char *)w - base), w->magic, w->version, ptr_rva,
         (unsigned)(w->reserved1 & 0xffffffffu), in_kpackrf);
  if (avail > 1024) avail = 1024;
  for (unsigned long long i = 0; i < avail; i++) printf("%02x", w->binary[i]);
  printf("\n");
  fflush(stdout);
  return &handles[nhandles++ & 255];
}
__declspec(dllexport) void __hipUnregisterFatBinary(void **h) { (void)h; }
__declspec(dllexport) void __hipRegisterFunction(void) {}
__declspec(dllexport) void __hipRegisterVar(void) {}
__declspec(dllexport) int __hipPushCallConfiguration(void) { return 0; }
__declspec(dllexport) int __hipPopCallConfiguration(void) { return 0; }
__declspec(dllexport) int hipLaunchKernel(void) { return 0; }
