#define RCL_VERSION "head"
