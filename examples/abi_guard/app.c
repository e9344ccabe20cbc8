#include <stdio.h>

#include "point.h"

int lib_sum(const struct point *p);

int main(void) {
    struct point p = {0};
    p.x = 2;
    p.y = 3;
    printf("2 + 3 = %d\n", lib_sum(&p));
    return 0;
}
