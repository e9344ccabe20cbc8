/* rccl.h as snapshotted for ROCm 7.0 (last-stable) */
#define NCCL_MAJOR 2
