/* rccl.h as snapshotted for ROCm 7.0 (stable) */
#define NCCL_MAJOR 2
