#define RCL_VERSION "1"
