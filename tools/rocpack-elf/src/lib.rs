//! rocpack-elf
