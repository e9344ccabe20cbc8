#define RCL_VERSION "2"
