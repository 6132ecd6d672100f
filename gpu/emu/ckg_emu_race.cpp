/*
 * ckg_emu_race.cpp — the emulator's shared-memory race detector.
 *
 * Happens-before within a block comes only from __syncthreads (orders every
 * thread) and a completed __syncwarp(mask) (orders the lanes of mask);
 * shuffles, votes, mma and ldmatrix order nothing, as in the CUDA memory
 * model.  A block barrier starts a new generation (gen).  Within a gen each
 * thread has an epoch (E, starts at 1) and a vector clock over its warp's
 * 32 lanes (vc[l] = the latest epoch of lane l it is ordered after); a
 * __syncwarp joins the clocks of its lanes, then each advances its epoch.
 * An access (tid a, gen g, epoch e) is ordered before the running thread u
 * when a == u, g is an older gen, or a is in u's warp and u.vc[lane a] >= e.
 *
 * Shadow, for every byte of dynamic and static shared memory: the last store
 * (thread, gen, epoch, code address, plain / atomic / cp.async in flight)
 * and the loads since it in this gen: while they come from one warp, each
 * lane's latest epoch and code address; once from two warps, one example of
 * each (any store in the same gen then races with one of them).  Two
 * conflicting accesses (one a store; atomics do not conflict with atomics)
 * not ordered are a kernel error naming both source lines (addr2line on the
 * code addresses; the kernels are built with -g).  A cp.async is a store in
 * flight from its issue until the issuer's wait_group retires it: any
 * access to those bytes meanwhile is an error, other lanes' accesses after
 * it need a __syncwarp/__syncthreads after the wait, and its issue must be
 * ordered after every earlier access of other lanes to the destination (a
 * ring stage refilled while a lane still reads it).
 *
 * Loads recorded on a byte once two warps read it are pruned to two
 * examples, and several unordered atomics on a byte keep the first and the
 * last: a race may then be reported with another partner than the first,
 * never missed for a pair of warps.
 */
#include "ckg_emu_race.h"

#include "ckg_emu.h"

#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <string>

namespace ckg_race {

bool on = true;

namespace {

constexpr size_t kDynCap = 227 * 1024;
constexpr int kMaxThreads = 1024;
enum WKind : uint8_t { W_NONE, W_PLAIN, W_ATOMIC, W_ASYNC, W_ASYNC_DONE };

struct Sh {
    uint32_t wgen, wep, rgen, rmask;
    int32_t wpc, a0pc, expc[2];
    uint16_t wtid, a0tid, extid[2];
    uint32_t amask;   /* warps with an atomic on the byte in gen wgen (wkind == W_ATOMIC) */
    uint8_t wkind;
    int8_t rwarp;     /* -1: no loads in gen rgen, -2: loads from two warps or more */
};

struct Thr {
    uint32_t E;
    uint32_t vc[32];
};

Sh *sh;
uint64_t *lr;   /* [lane][byte]: epoch | code offset << 32 of the lane's latest load in gen rgen */
size_t nbytes;
Thr thr[kMaxThreads];
int nthr;
uint32_t gen;
const uint8_t *dyn_lo, *dyn_hi, *st_lo, *st_hi;

int32_t code_off(uintptr_t pc)
{
    intptr_t d = (intptr_t)pc - (intptr_t)(uintptr_t)&block_start;
    return d > INT32_MIN && d < INT32_MAX ? (int32_t)d : INT32_MIN;
}

/* "file:line <- file:line ..." for a code address, innermost first (inlined calls). */
std::string where(int32_t off)
{
    if (off == INT32_MIN)
        return "?";
    const uintptr_t pc = (uintptr_t)&block_start + (intptr_t)off - 1;   /* inside the call instruction */
    Dl_info di;
    char buf[64];
    snprintf(buf, sizeof buf, "%#lx", (unsigned long)pc);
    if (!dladdr((void *)pc, &di) || !di.dli_fname)
        return buf;
    uintptr_t a = pc;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)di.dli_fbase;
    if (eh && eh->e_type == ET_DYN)
        a -= (uintptr_t)di.dli_fbase;
    char hex[32];
    snprintf(hex, sizeof hex, "%#lx", (unsigned long)a);
    std::string cmd = "addr2line -i -e '" + std::string(di.dli_fname) + "' " + hex + " 2>/dev/null";
    FILE *f = popen(cmd.c_str(), "r");
    if (!f)
        return buf;
    std::string out;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        std::string loc(line, strcspn(line, "\n"));
        size_t slash = loc.rfind('/');
        if (slash != std::string::npos)
            loc = loc.substr(slash + 1);
        size_t sp = loc.find(' ');
        if (sp != std::string::npos)
            loc.resize(sp);
        out += (out.empty() ? "" : " <- ") + loc;
    }
    pclose(f);
    return out.empty() || out[0] == '?' ? std::string(buf) : out;
}

const char *kind_name(int k)
{
    switch (k) {
    case READ: return "load";
    case WRITE: return "store";
    case ATOMIC_READ: return "atomic load";
    case ATOMIC: return "atomic";
    case ASYNC_ISSUE: return "cp.async";
    default: return "cp.async (waited for)";
    }
}

std::string place(size_t idx)
{
    char b[96];
    if (idx < kDynCap)
        snprintf(b, sizeof b, "dynamic shared memory +%zu", idx);
    else
        snprintf(b, sizeof b, "static __shared__ memory +%zu", idx - kDynCap);
    return b;
}

[[noreturn]] void race(size_t idx, const char *what_a, int tid_a, int32_t pc_a, int k_b, int tid_b, uintptr_t pc_b,
                       const char *why)
{
    std::string a = where(pc_a), b = where(code_off(pc_b));
    ckg_emu_fail("shared-memory race at %s: %s by thread %d at %s and %s by thread %d at %s: %s", place(idx).c_str(),
                 what_a, tid_a, a.c_str(), kind_name(k_b), tid_b, b.c_str(), why);
}

bool ordered(int u, int a, uint32_t ep)
{
    return a == u || ((a >> 5) == (u >> 5) && thr[u].vc[a & 31] >= ep);
}

void new_gen(void)
{
    gen++;
    for (int i = 0; i < nthr; i++) {
        memset(thr[i].vc, 0, sizeof thr[i].vc);
        thr[i].E = 1;
        thr[i].vc[i & 31] = 1;
    }
}

const char *const kNoOrder = "no __syncthreads or __syncwarp orders them";

/* The last store to byte idx against an access of kind k by thread u. */
void check_store(size_t idx, Sh &s, int u, Kind k, uintptr_t pc)
{
    if (s.wkind == W_ASYNC) {   /* in flight, whatever the gen: only its own retirement may touch it */
        if (k == ASYNC_RETIRE && s.wtid == u)
            return;
        race(idx, "cp.async (in flight)", s.wtid, s.wpc, k, u, pc,
             s.wtid == u ? "the issuing thread touches it before its cp.async.wait_group"
                         : "the copy lands at any time until the issuer's wait_group");
    }
    if (s.wgen != gen || s.wkind == W_NONE)
        return;
    const bool k_atomic = k == ATOMIC || k == ATOMIC_READ;
    if (s.wkind == W_ATOMIC && k_atomic)
        return;
    if (s.wkind == W_ATOMIC) {   /* some warp other than u's did an atomic on it in this gen */
        if (s.amask & ~(1u << (u >> 5))) {
            if ((s.a0tid >> 5) != (u >> 5))
                race(idx, "atomic", s.a0tid, s.a0pc, k, u, pc, kNoOrder);
            race(idx, "atomic", s.wtid, s.wpc, k, u, pc, kNoOrder);
        }
    }
    if (!ordered(u, s.wtid, s.wep))
        race(idx, s.wkind == W_ATOMIC ? "atomic" : s.wkind == W_ASYNC_DONE ? "cp.async (waited for)" : "store", s.wtid,
             s.wpc, k, u, pc, kNoOrder);
}

/* The loads of byte idx in this gen against a store-like access by u. */
void check_loads(size_t idx, Sh &s, int u, Kind k, uintptr_t pc)
{
    if (s.rgen != gen || s.rwarp == -1)
        return;
    const int w = u >> 5;
    if (s.rwarp == -2) {
        int e = (s.extid[0] >> 5) != w ? 0 : 1;
        race(idx, "load", s.extid[e], s.expc[e], k, u, pc, kNoOrder);
    }
    if (s.rwarp != w)
        race(idx, "load", s.extid[0], s.expc[0], k, u, pc, kNoOrder);
    for (unsigned m = s.rmask & ~(1u << (u & 31)); m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        const uint64_t e = lr[(size_t)l * nbytes + idx];
        if (thr[u].vc[l] < (uint32_t)e)
            race(idx, "load", w * 32 + l, (int32_t)(e >> 32), k, u, pc, kNoOrder);
    }
}

} // namespace

void block_start(int nthreads, const uint8_t *dyn, size_t dyn_size, const uint8_t *st, size_t st_size)
{
    const char *e = getenv("CKG_EMU_RACES");
    on = !(e && e[0] == '0');
    if (!sh) {
        nbytes = kDynCap + st_size;
        void *a = mmap(nullptr, nbytes * sizeof(Sh), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        void *b = mmap(nullptr, nbytes * 32 * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (a == MAP_FAILED || b == MAP_FAILED)
            ckg_emu_fail("cannot map the race detector's shadow");
        sh = (Sh *)a;
        lr = (uint64_t *)b;
    }
    nthr = nthreads;
    dyn_lo = dyn;
    dyn_hi = dyn + dyn_size;
    st_lo = st;
    st_hi = st + st_size;
    new_gen();
}

void barrier(void) { new_gen(); }

void syncwarp(int warp, unsigned mask)
{
    uint32_t j[32] = {0};
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1)
            for (int k = 0; k < 32; k++)
                j[k] = j[k] > thr[warp * 32 + l].vc[k] ? j[k] : thr[warp * 32 + l].vc[k];
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1) {
            Thr &t = thr[warp * 32 + l];
            memcpy(t.vc, j, sizeof j);
            t.vc[l] = ++t.E;
        }
}

bool is_shared(const void *p)
{
    const uint8_t *q = (const uint8_t *)p;
    return (q >= dyn_lo && q < dyn_hi) || (q >= st_lo && q < st_hi);
}

void access(int u, const void *p, size_t n, Kind k, uintptr_t pc)
{
    if (!on || !sh)
        return;
    const uint8_t *q = (const uint8_t *)p;
    size_t idx;
    if (q >= dyn_lo && q < dyn_hi)
        idx = (size_t)(q - dyn_lo);
    else if (q >= st_lo && q < st_hi)
        idx = kDynCap + (size_t)(q - st_lo);
    else
        return;
    if (idx + n > nbytes)
        n = nbytes - idx;
    Thr &t = thr[u];
    const int w = u >> 5, lane = u & 31;
    const int32_t off = code_off(pc);
    for (size_t i = 0; i < n; i++) {
        Sh &s = sh[idx + i];
        check_store(idx + i, s, u, k, pc);
        if (k == READ) {
            if (s.rgen != gen) {
                s.rgen = gen;
                s.rwarp = (int8_t)w;
                s.rmask = 0;
                s.extid[0] = (uint16_t)u;
                s.expc[0] = off;
            } else if (s.rwarp >= 0 && s.rwarp != w) {
                s.extid[1] = (uint16_t)u;
                s.expc[1] = off;
                s.rwarp = -2;
            }
            if (s.rwarp == w) {
                s.rmask |= 1u << lane;
                lr[(size_t)lane * nbytes + idx + i] = t.E | (uint64_t)(uint32_t)off << 32;
            }
            continue;
        }
        if (k == ATOMIC_READ)
            continue;
        if (k != ASYNC_RETIRE)
            check_loads(idx + i, s, u, k, pc);
        if (k == ATOMIC && s.wkind == W_ATOMIC && s.wgen == gen) {
            s.amask |= 1u << w;
        } else if (k == ATOMIC) {
            s.amask = 1u << w;
            s.a0tid = (uint16_t)u;
            s.a0pc = off;
        }
        s.wgen = gen;
        s.wep = t.E;
        s.wtid = (uint16_t)u;
        if (k != ASYNC_RETIRE)
            s.wpc = off;
        s.wkind = k == ASYNC_ISSUE ? W_ASYNC : k == ASYNC_RETIRE ? W_ASYNC_DONE : k == ATOMIC ? W_ATOMIC : W_PLAIN;
        s.rgen = 0;
    }
}

} // namespace ckg_race
