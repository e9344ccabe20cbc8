/* rccl.h as snapshotted for ROCm 6.2 (last-stable) */
#define NCCL_MAJOR 2
