/*
 * ckc_hash_avx2.c — XXH3-64 (xxHash, header-only) compiled for AVX2.
 *
 * The chunk checksums of docs/format.md are XXH3-64.  Inlined into ckc.c,
 * which is built for baseline x86-64, xxHash takes its SSE2 loop: a 128 KiB
 * chunk in cache hashed at 19.4-19.7 GB/s, where ckc_hash64 with this file
 * does 55.8-56.0 GB/s (best of 2,000 interleaved rounds, the Zen 4 of this
 * project's machines): about 35 ms less per GiB decoded, some 5% of a mount
 * daemon's CPU per byte served (docs/performance.md, "Many readers").  This file alone is built
 * with -mavx2 (codec/CMakeLists.txt), so xxHash selects its AVX2 loop here;
 * ckc_hash64 calls it only when the running CPU has AVX2.  XXH3 gives the
 * same value whichever loop computes it (tests/unit/test_codec.c checks
 * the two against each other).
 */
#include "ckc_internal.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#if !defined(__AVX2__)
#error "ckc_hash_avx2.c must be built with -mavx2"
#endif

uint64_t ckc_hash64_avx2(const void *p, size_t size) { return XXH3_64bits(p, size); }
