/*
 * ckg_emu_race.h — the emulator's shared-memory race detector (internal to
 * gpu/emu; see ckg_emu_race.cpp).  ckg_emu.cpp calls it at every block
 * start, block barrier and completed __syncwarp, and for every access of a
 * kernel to shared memory: the plain loads and stores the compiler
 * instruments (-fsanitize=thread code, our own __tsan_* entry points),
 * atomics, ldmatrix rows and cp.async copies.
 */
#ifndef CKG_EMU_RACE_H
#define CKG_EMU_RACE_H

#include <stddef.h>
#include <stdint.h>

namespace ckg_race {

enum Kind {
    READ,          /* a plain load */
    WRITE,         /* a plain store */
    ATOMIC_READ,   /* an atomic load: races only with plain stores */
    ATOMIC,        /* an atomic read-modify-write: races with plain accesses, not with atomics */
    ASYNC_ISSUE,   /* cp.async issued: the bytes are in flight until the issuer's wait_group */
    ASYNC_RETIRE   /* that wait_group: a store by the issuer, at the issuer's place in the order */
};

extern bool on;   /* CKG_EMU_RACES=0 turns the detector off (the scheduling stays random) */

/* Shared memory of the block about to run: the dynamic buffer and the
 * static `__shared__` section; every thread starts a new epoch. */
void block_start(int nthreads, const uint8_t *dyn, size_t dyn_size, const uint8_t *st, size_t st_size);
void barrier(void);                              /* __syncthreads completed */
void syncwarp(int warp, unsigned mask);          /* __syncwarp(mask) completed in warp */
bool is_shared(const void *p);
/* An access of n bytes at p by thread tid (block-linear) from code at pc. */
void access(int tid, const void *p, size_t n, Kind k, uintptr_t pc);

} // namespace ckg_race

#endif /* CKG_EMU_RACE_H */
