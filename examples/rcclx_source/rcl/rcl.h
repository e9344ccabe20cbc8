const char *rcl_version(void);
