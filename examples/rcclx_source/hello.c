#include <stdio.h>

#include "examples/rcclx_source/rcl/rcl.h"

int main(void) {
    printf("rcl %s\n", rcl_version());
    return 0;
}
