/* The dependency's struct, layout 2: a field in front moves every offset. */
struct point { long id; int x; int y; };
