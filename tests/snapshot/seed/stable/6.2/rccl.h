/* rccl.h as snapshotted for ROCm 6.2 (stable) */
#define NCCL_MAJOR 2
