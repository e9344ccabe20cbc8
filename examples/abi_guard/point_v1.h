/* The dependency's struct, layout 1 (what the prebuilt snapshot was compiled against). */
struct point { int x; int y; };
