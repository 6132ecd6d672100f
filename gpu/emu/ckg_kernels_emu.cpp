/* ckg_kernels_emu.cpp — the real kernel source, compiled as host C++ for the
 * CPU emulator (CKG_EMU: ckg_arch.h takes its intrinsics from emu/ckg_emu.h). */
#include "../ckg_kernels.cu"
