/*
 * ckg_emu.cpp — the CPU emulator of the CUDA device the kernels of gpu/ run
 * on (see ckg_emu.h for the model): fibers and their scheduler, block
 * barriers, warp collectives (shuffles, votes, reduce, mma.m16n8k16 BF16,
 * ldmatrix) computed from every lane's operands to the PTX ISA's fragment
 * layouts, cp.async groups, and the CUDA runtime shim (cuda_runtime_api.h):
 * memory, streams as deferred in-order queues, events, errors.
 *
 * A fiber switch is a hand-written x86-64 stack switch (callee-saved
 * registers, MXCSR and the x87 control word); other CPUs use ucontext.
 */
#include "ckg_emu.h"
#include "ckg_emu_race.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

ckg_emu_thread *ckg_emu_cur;
uint64_t ckg_emu_st16_count;
extern "C" unsigned long long ckg_emu_st16_bytes_ull(void) { return ckg_emu_st16_count; }
/* device attribute queries and kernel attribute calls (ckg_emu_attr_calls_ull) */
static std::atomic<unsigned long long> attr_calls;
extern "C" unsigned long long ckg_emu_attr_calls_ull(void) { return attr_calls.load(); }

namespace {

constexpr size_t kStack = 256 * 1024;
constexpr size_t kMaxSmem = 227 * 1024;

/* ---- fibers ------------------------------------------------------------------ */
#if defined(__x86_64__)
extern "C" void ckg_emu_switch(void **save_sp, void *new_sp);
extern "C" void ckg_emu_trampoline(void);
asm(".text\n"
    ".globl ckg_emu_switch\n.type ckg_emu_switch,@function\n"
    "ckg_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".size ckg_emu_switch, .-ckg_emu_switch\n"
    ".globl ckg_emu_trampoline\n.type ckg_emu_trampoline,@function\n"
    "ckg_emu_trampoline:\n"
    "  movq %r12, %rdi\n  andq $-16, %rsp\n  call ckg_emu_fiber_main\n  ud2\n"
    ".size ckg_emu_trampoline, .-ckg_emu_trampoline\n");
#endif

struct Copy {
    void *dst;
    const void *src;
    int n, src_bytes;
    unsigned group;
    bool landed;      /* the bytes are in shared memory (maybe before the wait_group) */
    uint64_t id;
    uintptr_t pc;     /* the issuing code, for the race detector */
};
/* A copy that lands by itself at tick `at` unless its wait_group comes first. */
struct Landing {
    uint64_t at, id;
    int fiber;
    bool operator<(const Landing &o) const { return at > o.at; }   /* std::priority_queue: earliest on top */
};

enum State { RUNNABLE, AT_BARRIER, IN_WARP_OP, DONE };

struct Fiber {
    ckg_emu_thread t;
    int lane = 0, warp = 0, state = DONE, line = 0;
    char *stack = nullptr;
#if defined(__x86_64__)
    void *sp = nullptr;
#else
    ucontext_t uc;
#endif
    std::vector<Copy> copies;
    unsigned committed = 0;
};

/* The warp collective being gathered: operation, mask and each lane's operands. */
struct Warp {
    int op = -1, arg = 0, width = 32, line = 0;
    unsigned mask = 0, arrived = 0, live = 0;
    uint32_t in[32][10];
    const void *ptr[32];
    uint32_t out[32][4];
    uintptr_t pc[32];   /* each lane's call, for ldmatrix's loads */
};

struct Block {
    std::vector<Fiber> f;   /* grows, never shrinks (keeps the stacks); n in use */
    int n = 0;
    std::vector<Warp> w;
    std::vector<int> runnable;
    int live = 0, at_bar = 0, bar_line = 0;
    uint8_t *smem = nullptr;
    size_t smem_size = 0;
};

Block B;
const char *kname = "";
uint64_t rng;
/* Ticks: shared-memory accesses and scheduling decisions; cp.async copies
 * land at a random tick between their issue and their wait_group. */
uint64_t ticks, copy_ids;
std::vector<Landing> landings;   /* a heap (std::push_heap / pop_heap) */
std::function<void()> *body;
#if defined(__x86_64__)
void *sched_sp;
#else
ucontext_t sched_uc;
#endif

uint64_t next_rand()
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

Fiber *cur;
Fiber *self() { return cur; }

void to_scheduler()
{
    Fiber *me = self();
#if defined(__x86_64__)
    ckg_emu_switch(&me->sp, sched_sp);
#else
    swapcontext(&me->uc, &sched_uc);
#endif
}

void make_runnable(Fiber &f)
{
    f.state = RUNNABLE;
    B.runnable.push_back((int)(&f - B.f.data()));
}

} // namespace

[[noreturn]] void ckg_emu_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ckg-emu: kernel error in %s", kname);
    if (ckg_emu_cur)
        fprintf(stderr, " (block %u, thread %u)", ckg_emu_cur->bid.x, ckg_emu_cur->tid.x);
    fprintf(stderr, ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

namespace {

void land(Copy &c)
{
    if (c.landed)
        return;
    memcpy(c.dst, c.src, (size_t)c.src_bytes);
    memset((char *)c.dst + c.src_bytes, 0, (size_t)(c.n - c.src_bytes));
    c.landed = true;
}

/* Copies whose random tick has come land, whichever thread runs. */
void land_due()
{
    while (!landings.empty() && landings.front().at <= ticks) {
        std::pop_heap(landings.begin(), landings.end());
        const Landing l = landings.back();
        landings.pop_back();
        for (Copy &c : B.f[l.fiber].copies)
            if (c.id == l.id)
                land(c);
    }
}

void tick()
{
    ++ticks;
    if (!landings.empty() && landings.front().at <= ticks)
        land_due();
}

void run_copies(Fiber &f, unsigned upto)   /* retire groups < upto */
{
    size_t k = 0;
    const int tid = (int)(&f - B.f.data());
    for (Copy &c : f.copies) {
        if (c.group < upto) {
            land(c);
            ckg_race::access(tid, c.dst, (size_t)c.n, ckg_race::ASYNC_RETIRE, c.pc);
        } else {
            f.copies[k++] = c;
        }
    }
    f.copies.resize(k);
}

void thread_exit()
{
    Fiber *me = self();
    run_copies(*me, ~0u);
    Warp &w = B.w[me->warp];
    w.live &= ~(1u << me->lane);
    if (w.arrived && (w.mask >> me->lane & 1))
        ckg_emu_fail("lane %d exits while its warp waits for it in a collective (line %d, mask %08x)", me->lane,
                     w.line, w.mask);
    if (B.at_bar)
        ckg_emu_fail("thread exits while %d threads wait at __syncthreads (line %d)", B.at_bar, B.bar_line);
    me->state = DONE;
    B.live--;
}

} // namespace

extern "C" void ckg_emu_fiber_main(Fiber *f)
{
    (void)f;
    (*body)();
    thread_exit();
    to_scheduler();
    abort();
}

namespace {

#if !defined(__x86_64__)
void uc_entry(unsigned hi, unsigned lo) { ckg_emu_fiber_main((Fiber *)(((uintptr_t)hi << 32) | lo)); }
#endif

void start_fiber(Fiber &f)
{
    if (!f.stack) {
        void *s = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (s == MAP_FAILED)
            ckg_emu_fail("cannot map a fiber stack");
        f.stack = (char *)s;
    }
#if defined(__x86_64__)
    void **sp = (void **)(f.stack + kStack) - 2;
    *--sp = (void *)ckg_emu_trampoline;   /* ret target */
    *--sp = nullptr;                     /* rbp */
    *--sp = nullptr;                     /* rbx */
    *--sp = (void *)&f;                  /* r12: the fiber, for the trampoline */
    *--sp = nullptr;                     /* r13 */
    *--sp = nullptr;                     /* r14 */
    *--sp = nullptr;                     /* r15 */
    uint32_t csr[2];
    asm volatile("stmxcsr %0\n fnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
    --sp;
    memcpy(sp, csr, 8);
    f.sp = sp;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack;
    f.uc.uc_stack.ss_size = kStack;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, (void (*)())uc_entry, 2, (unsigned)((uintptr_t)&f >> 32), (unsigned)(uintptr_t)&f);
#endif
}

void deadlock()
{
    fprintf(stderr, "ckg-emu: kernel error in %s: deadlock, block %u:\n", kname, B.f[0].t.bid.x);
    for (int i = 0; i < B.n; i++) {
        Fiber &f = B.f[i];
        if (f.state == AT_BARRIER)
            fprintf(stderr, "  thread %u waits at __syncthreads (line %d)\n", f.t.tid.x, f.line);
        else if (f.state == IN_WARP_OP)
            fprintf(stderr, "  thread %u waits in a warp collective (line %d, mask %08x)\n", f.t.tid.x, f.line,
                    B.w[f.warp].mask);
    }
    abort();
}

void run_block(dim3 grid, dim3 block, unsigned bx, unsigned by, unsigned bz)
{
    const int n = (int)(block.x * block.y * block.z);
    B.live = n;
    B.at_bar = 0;
    B.runnable.clear();
    for (Warp &w : B.w)
        w = Warp();
    for (int i = 0; i < n; i++) {
        Fiber &f = B.f[i];
        f.t.tid = uint3{(unsigned)i % block.x, (unsigned)i / block.x % block.y, (unsigned)i / (block.x * block.y)};
        f.t.bid = uint3{bx, by, bz};
        f.t.bdim = uint3{block.x, block.y, block.z};
        f.t.gdim = uint3{grid.x, grid.y, grid.z};
        f.lane = i % 32;
        f.warp = i / 32;
        f.copies.clear();
        f.committed = 0;
        B.w[f.warp].live |= 1u << f.lane;
        start_fiber(f);
        make_runnable(f);
    }
    if (B.smem_size)
        memset(B.smem, 0xA5, B.smem_size);   /* shared memory starts undefined */
    const size_t st_size = (size_t)(__stop_ckg_emu_shared - __start_ckg_emu_shared);
    if (st_size)
        memset(__start_ckg_emu_shared, 0xA5, st_size);
    landings.clear();
    ckg_race::block_start(n, B.smem, B.smem_size, __start_ckg_emu_shared, st_size);
    while (B.live > 0) {
        if (B.runnable.empty())
            deadlock();
        tick();
        size_t k = next_rand() % B.runnable.size();
        Fiber &f = B.f[B.runnable[k]];
        B.runnable[k] = B.runnable.back();
        B.runnable.pop_back();
        ckg_emu_cur = &f.t;
        cur = &f;
#if defined(__x86_64__)
        ckg_emu_switch(&sched_sp, f.sp);
#else
        swapcontext(&sched_uc, &f.uc);
#endif
        ckg_emu_cur = nullptr;
        cur = nullptr;
    }
}

/* ---- warp collectives -------------------------------------------------------------- */

float bf16f(uint32_t h) { return ckg_u32_as_f32((h & 0xFFFFu) << 16); }

void complete_mma(Warp &w)
{
    /* A (16x16) and B (16x8) from the fragments (PTX ISA, mma.m16n8k16 .bf16) */
    float A[16][16], Bm[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        const uint32_t *r = w.in[l];
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = bf16f(r[0] >> 16 * h);
            A[g + 8][2 * t + h] = bf16f(r[1] >> 16 * h);
            A[g][2 * t + 8 + h] = bf16f(r[2] >> 16 * h);
            A[g + 8][2 * t + 8 + h] = bf16f(r[3] >> 16 * h);
            Bm[2 * t + h][g] = bf16f(r[4] >> 16 * h);
            Bm[2 * t + 8 + h][g] = bf16f(r[5] >> 16 * h);
        }
        C[g][2 * t] = ckg_u32_as_f32(r[6]);
        C[g][2 * t + 1] = ckg_u32_as_f32(r[7]);
        C[g + 8][2 * t] = ckg_u32_as_f32(r[8]);
        C[g + 8][2 * t + 1] = ckg_u32_as_f32(r[9]);
    }
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        for (int j = 0; j < 4; j++) {
            int m = g + 8 * (j >> 1), nn = 2 * t + (j & 1);
            double s = C[m][nn];   /* products of BF16 are exact in double; one rounding to FP32 */
            for (int k = 0; k < 16; k++)
                s += (double)A[m][k] * Bm[k][nn];
            float v = (float)s;
            memcpy(&w.out[l][j], &v, 4);
        }
    }
}

void complete_ldmatrix(Warp &w, int mats, bool trans, int warp)
{
    for (int l = 0; l < 8 * mats; l++)
        if ((uintptr_t)w.ptr[l] & 15)
            ckg_emu_fail("ldmatrix row address %p of lane %d not 16-byte aligned", w.ptr[l], l);
    for (int l = 0; l < 8 * mats; l++)   /* each row: a load by the lane that gave its address */
        ckg_race::access(warp * 32 + l, w.ptr[l], 16, ckg_race::READ, w.pc[l]);
    for (int l = 0; l < 32; l++)
        for (int j = 0; j < mats; j++) {
            uint16_t lo, hi;
            if (!trans) {
                memcpy(&lo, (const char *)w.ptr[8 * j + l / 4] + 4 * (l % 4), 2);
                memcpy(&hi, (const char *)w.ptr[8 * j + l / 4] + 4 * (l % 4) + 2, 2);
            } else {
                memcpy(&lo, (const char *)w.ptr[8 * j + 2 * (l % 4)] + 2 * (l / 4), 2);
                memcpy(&hi, (const char *)w.ptr[8 * j + 2 * (l % 4) + 1] + 2 * (l / 4), 2);
            }
            w.out[l][j] = lo | (uint32_t)hi << 16;
        }
}

void complete(Warp &w, int warp)
{
    const unsigned m = w.mask;
    uint32_t ballot = 0, sum = 0;
    for (int l = 0; l < 32; l++)
        if (m >> l & 1) {
            ballot |= (w.in[l][0] != 0) << l;
            sum += w.in[l][0];
        }
    switch (w.op) {
    case CKG_EMU_SYNCWARP:
        ckg_race::syncwarp(warp, m);
        break;
    case CKG_EMU_SHFL: case CKG_EMU_SHFL_XOR: case CKG_EMU_SHFL_UP: case CKG_EMU_SHFL_DOWN: {
        const int wd = w.width;
        if (wd < 1 || wd > 32 || (wd & (wd - 1)))
            ckg_emu_fail("shuffle width %d (line %d)", wd, w.line);
        for (int l = 0; l < 32; l++) {
            if (!(m >> l & 1))
                continue;
            int base = l & ~(wd - 1), src = l;
            if (w.op == CKG_EMU_SHFL)
                src = base + (w.arg & (wd - 1));
            else if (w.op == CKG_EMU_SHFL_UP)
                src = (l - base) >= w.arg ? l - w.arg : l;
            else if (w.op == CKG_EMU_SHFL_DOWN)
                src = (l - base) + w.arg < wd ? l + w.arg : l;
            else
                src = (l ^ w.arg) < base + wd ? (l ^ w.arg) & 31 : l;
            if (!(m >> src & 1))
                ckg_emu_fail("lane %d shuffles from lane %d, outside the mask %08x", l, src, m);
            w.out[l][0] = w.in[src][0];
        }
        break;
    }
    case CKG_EMU_BALLOT: case CKG_EMU_ANY: case CKG_EMU_ALL: case CKG_EMU_REDUCE_ADD:
        for (int l = 0; l < 32; l++)
            w.out[l][0] = w.op == CKG_EMU_BALLOT ? ballot
                        : w.op == CKG_EMU_ANY    ? ballot != 0
                        : w.op == CKG_EMU_ALL    ? ballot == m
                                                 : sum;
        break;
    case CKG_EMU_MMA_BF16_16816:
        complete_mma(w);
        break;
    case CKG_EMU_LDMATRIX_X1: complete_ldmatrix(w, 1, false, warp); break;
    case CKG_EMU_LDMATRIX_X2: complete_ldmatrix(w, 2, false, warp); break;
    case CKG_EMU_LDMATRIX_X4: complete_ldmatrix(w, 4, false, warp); break;
    case CKG_EMU_LDMATRIX_X4_TRANS: complete_ldmatrix(w, 4, true, warp); break;
    default:
        ckg_emu_fail("unknown warp operation %d", w.op);
    }
}

} // namespace

void ckg_emu_warp(int op, unsigned mask, const uint32_t *in, int nin, int arg, int width, const void *ptr,
                  uint32_t *out, int line)
{
    Fiber *me = self();
    Warp &w = B.w[me->warp];
    if (!(mask >> me->lane & 1))
        ckg_emu_fail("lane %d calls a warp collective (line %d) with mask %08x that excludes it", me->lane, line, mask);
    if ((mask & w.live) != mask)
        ckg_emu_fail("warp collective (line %d) with mask %08x, but lanes %08x have exited", line, mask, mask & ~w.live);
    if (w.arrived == 0) {
        w.op = op;
        w.mask = mask;
        w.arg = arg;
        w.width = width;
        w.line = line;
    } else if (w.op != op || w.mask != mask || w.arg != arg || w.width != width) {
        ckg_emu_fail("divergent warp collectives: lane %d at operation %d mask %08x arg %d (line %d), others at "
                     "operation %d mask %08x arg %d (line %d)",
                     me->lane, op, mask, arg, line, w.op, w.mask, w.arg, w.line);
    }
    memcpy(w.in[me->lane], in ? in : w.in[me->lane], (size_t)nin * 4);
    w.ptr[me->lane] = ptr;
    w.pc[me->lane] = (uintptr_t)__builtin_return_address(0);
    w.arrived |= 1u << me->lane;
    if (w.arrived == mask) {   /* last one in: compute, wake the others */
        complete(w, me->warp);
        w.arrived = 0;
        for (int l = 0; l < 32; l++)
            if ((mask >> l & 1) && l != me->lane)
                make_runnable(B.f[me->warp * 32 + l]);
    } else {
        me->state = IN_WARP_OP;
        me->line = line;
        to_scheduler();
    }
    if (out)
        memcpy(out, w.out[me->lane], 16);
}

void ckg_emu_syncthreads(int line)
{
    Fiber *me = self();
    if (B.live < B.n)
        ckg_emu_fail("__syncthreads (line %d) after %d threads of the block exited", line, B.n - B.live);
    if (B.at_bar == 0)
        B.bar_line = line;
    else if (B.bar_line != line)
        ckg_emu_fail("divergent __syncthreads: line %d and line %d", line, B.bar_line);
    if (++B.at_bar == B.live) {
        B.at_bar = 0;
        ckg_race::barrier();
        for (int i = 0; i < B.n; i++)
            if (B.f[i].state == AT_BARRIER)
                make_runnable(B.f[i]);
        return;
    }
    me->state = AT_BARRIER;
    me->line = line;
    to_scheduler();
}

void *ckg_emu_dyn_smem(void) { return B.smem; }

void ckg_emu_cp_async(void *smem, const void *gmem, int n, int src_bytes)
{
    if (((uintptr_t)smem | (uintptr_t)gmem) & (uintptr_t)(n - 1))
        ckg_emu_fail("cp.async of %d bytes from %p to %p: addresses not %d-byte aligned", n, gmem, smem, n);
    Fiber *me = self();
    const uintptr_t pc = (uintptr_t)__builtin_return_address(0);
    const int tid = (int)(me - B.f.data());
    ckg_race::access(tid, smem, (size_t)n, ckg_race::ASYNC_ISSUE, pc);
    const uint64_t id = ++copy_ids, r = next_rand();
    me->copies.push_back(Copy{smem, gmem, n, src_bytes, ~0u, false, id, pc});
    if (r & 3) {   /* 3 in 4 land by themselves, 1 to 2^14 ticks after the issue (log-uniform) */
        landings.push_back(Landing{ticks + 1 + ((r >> 8) & ((1ull << ((r >> 2) % 15)) - 1)), id, tid});
        std::push_heap(landings.begin(), landings.end());
    }
}

void ckg_emu_cp_commit(void)
{
    Fiber *me = self();
    for (Copy &c : me->copies)
        if (c.group == ~0u)
            c.group = me->committed;
    me->committed++;
}

void ckg_emu_cp_wait(int n)
{
    Fiber *me = self();
    if (me->committed > (unsigned)n)
        run_copies(*me, me->committed - (unsigned)n);
}

/* ---- launches, streams and the runtime shim ---------------------------------------- */

struct CUstream_st {
    unsigned flags;
    std::deque<std::function<void()>> q;
};
struct CUevent_st {
    cudaStream_t s;
    double t;
};

namespace {

std::recursive_mutex mu;
cudaError_t last_err = cudaSuccess;
std::vector<cudaStream_t> streams;
std::map<uintptr_t, size_t> allocs;   /* device allocations: start -> size */

cudaError_t fail(cudaError_t e)
{
    last_err = e;
    return e;
}

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void drain(cudaStream_t s)
{
    while (!s->q.empty()) {
        std::function<void()> fn = std::move(s->q.front());
        s->q.pop_front();
        fn();
    }
}

/* Run fn on stream s: the legacy stream (NULL) first waits for every blocking
 * stream; other streams queue it until someone waits. */
cudaError_t submit(cudaStream_t s, std::function<void()> fn)
{
    std::lock_guard<std::recursive_mutex> lk(mu);
    if (s) {
        if (std::find(streams.begin(), streams.end(), s) == streams.end())
            return fail(cudaErrorInvalidResourceHandle);
        s->q.push_back(std::move(fn));
        return cudaSuccess;
    }
    for (cudaStream_t t : streams)
        if (!(t->flags & cudaStreamNonBlocking))
            drain(t);
    fn();
    return cudaSuccess;
}

void launch_now(const char *name, dim3 grid, dim3 block, size_t smem, const std::function<void()> &fn)
{
    const int n = (int)(block.x * block.y * block.z);
    kname = name;
    body = const_cast<std::function<void()> *>(&fn);
    if ((int)B.f.size() < n)
        B.f.resize((size_t)n);
    B.n = n;
    B.w.resize((size_t)(n + 31) / 32);
    if (B.smem_size < smem) {
        free(B.smem);
        B.smem = (uint8_t *)aligned_alloc(128, (smem + 127) & ~(size_t)127);
    }
    B.smem_size = smem;
    const char *seed = getenv("CKG_EMU_SEED");
    rng = (seed ? strtoull(seed, nullptr, 0) : 0x5EED) * 0x9E3779B97F4A7C15ull + 1;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++)
                run_block(grid, block, x, y, z);
    kname = "";
}

} // namespace

cudaError_t ckg_emu_launch_body(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                std::function<void()> fn)
{
    unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
        smem > kMaxSmem)
        return fail(cudaErrorInvalidConfiguration);
    std::string nm = name;
    return submit(s, [nm, grid, block, smem, fn]() { launch_now(nm.c_str(), grid, block, smem, fn); });
}

extern "C" {

cudaError_t ckg_emu_func_set_attribute(const void *f, cudaFuncAttribute a, int v)
{
    (void)f;
    attr_calls++;
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || (size_t)v > kMaxSmem)
        return fail(cudaErrorInvalidValue);
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = getenv("CKG_EMU_NO_DEVICE") ? 0 : 1;
    return *n ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaGetDevice(int *dev) { *dev = 0; return cudaSuccess; }
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev)
{
    attr_calls++;
    if (dev != 0)
        return fail(cudaErrorInvalidDevice);
    *v = a == cudaDevAttrMultiProcessorCount ? 2 : a == cudaDevAttrMaxThreadsPerBlock ? 1024
         : a == cudaDevAttrComputeCapabilityMajor ? 9 : 0;   /* cp.async, mma.sync: an sm_90 */
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void)
{
    std::lock_guard<std::recursive_mutex> lk(mu);
    for (cudaStream_t t : streams)
        drain(t);
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_err;
    last_err = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_err; }
const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error (emulator)";
    case cudaErrorInvalidValue: return "invalid argument (emulator)";
    case cudaErrorMemoryAllocation: return "out of memory (emulator)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulator)";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected (emulator)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle (emulator)";
    default: return "unknown error (emulator)";
    }
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    std::lock_guard<std::recursive_mutex> lk(mu);
    *p = aligned_alloc(256, (n + 255) & ~(size_t)255);
    if (!*p)
        return fail(cudaErrorMemoryAllocation);
    memset(*p, 0xA5, n);   /* device memory starts undefined */
    allocs[(uintptr_t)*p] = n;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    std::lock_guard<std::recursive_mutex> lk(mu);
    if (!allocs.erase((uintptr_t)p))
        return fail(cudaErrorInvalidValue);
    cudaDeviceSynchronize();
    free(p);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    *p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
    return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }
cudaError_t cudaFreeHost(void *p)
{
    free(p);
    return cudaSuccess;
}

} // extern "C"

namespace {
/* Is [p, p+n) inside one device allocation? */
bool on_device(const void *p, size_t n)
{
    auto it = allocs.upper_bound((uintptr_t)p);
    if (it == allocs.begin())
        return false;
    --it;
    return (uintptr_t)p + n <= it->first + it->second;
}

cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
    std::lock_guard<std::recursive_mutex> lk(mu);
    bool dd = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
    bool sd = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
    if (n && k != cudaMemcpyDefault && ((dd && !on_device(dst, n)) || (sd && !on_device(src, n))))
        return fail(cudaErrorInvalidValue);
    return cudaSuccess;
}
} // namespace

extern "C" {

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s)
{
    cudaError_t e = check_copy(dst, src, n, k);
    if (e != cudaSuccess)
        return e;
    return submit(s, [=]() { memmove(dst, src, n); });
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k)
{
    return cudaMemcpyAsync(dst, src, n, k, nullptr);
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    {
        std::lock_guard<std::recursive_mutex> lk(mu);
        if (n && !on_device(p, n))
            return fail(cudaErrorInvalidValue);
    }
    return submit(s, [=]() { memset(p, v, n); });
}
cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, nullptr); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    std::lock_guard<std::recursive_mutex> lk(mu);
    *s = new CUstream_st{flags, {}};
    streams.push_back(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> lk(mu);
    auto it = std::find(streams.begin(), streams.end(), s);
    if (it == streams.end())
        return fail(cudaErrorInvalidResourceHandle);
    drain(s);
    streams.erase(it);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    std::lock_guard<std::recursive_mutex> lk(mu);
    if (!s)
        return cudaDeviceSynchronize();
    if (std::find(streams.begin(), streams.end(), s) == streams.end())
        return fail(cudaErrorInvalidResourceHandle);
    drain(s);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = new CUevent_st{nullptr, 0};
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    e->s = s;
    return submit(s, [e]() { e->t = now_ms(); });
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaStreamSynchronize(e->s); }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)s;
    (void)flags;
    return cudaEventSynchronize(e);
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

} // extern "C"

/* ---- the compiler's instrumentation of kernel code ----------------------------------
 * Kernel sources are compiled with -fsanitize=thread (and without its
 * runtime): every load and store calls one of these.  Those to shared
 * memory, made by a CUDA thread, go to the race detector; there the running
 * thread may also be switched out (1 in 16 accesses), so that a plain
 * read-modify-write of shared memory can be split by other threads.  Host
 * code of the same sources reaches here too, and returns at once. */
namespace {

void on_access(const void *p, size_t n, ckg_race::Kind k, uintptr_t pc)
{
    Fiber *me = cur;
    if (!me || !ckg_race::is_shared(p))
        return;
    tick();
    if ((next_rand() & 15) == 0) {
        make_runnable(*me);
        to_scheduler();
    }
    ckg_race::access((int)(me - B.f.data()), p, n, k, pc);
}

} // namespace

#define CKG_RET ((uintptr_t)__builtin_return_address(0))
#define CKG_TSAN_RW(n)                                                                                     \
    void __tsan_read##n(void *p) { on_access(p, n, ckg_race::READ, CKG_RET); }                             \
    void __tsan_write##n(void *p) { on_access(p, n, ckg_race::WRITE, CKG_RET); }                           \
    void __tsan_unaligned_read##n(void *p) { on_access(p, n, ckg_race::READ, CKG_RET); }                   \
    void __tsan_unaligned_write##n(void *p) { on_access(p, n, ckg_race::WRITE, CKG_RET); }                 \
    void __tsan_volatile_read##n(void *p) { on_access(p, n, ckg_race::READ, CKG_RET); }                    \
    void __tsan_volatile_write##n(void *p) { on_access(p, n, ckg_race::WRITE, CKG_RET); }

extern "C" {
void __tsan_init(void) {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit(void) {}
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}
CKG_TSAN_RW(1)
CKG_TSAN_RW(2)
CKG_TSAN_RW(4)
CKG_TSAN_RW(8)
CKG_TSAN_RW(16)
void __tsan_read_range(void *p, unsigned long n) { on_access(p, n, ckg_race::READ, CKG_RET); }
void __tsan_write_range(void *p, unsigned long n) { on_access(p, n, ckg_race::WRITE, CKG_RET); }

/* Atomics (the memory order is ignored: a block's threads run one at a time). */
#define CKG_TSAN_ATOMIC(b, T)                                                                              \
    T __tsan_atomic##b##_load(const volatile T *a, int)                                                    \
    {                                                                                                      \
        on_access((const void *)a, sizeof(T), ckg_race::ATOMIC_READ, CKG_RET);                             \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                       \
    }                                                                                                      \
    void __tsan_atomic##b##_store(volatile T *a, T v, int)                                                 \
    {                                                                                                      \
        on_access((const void *)a, sizeof(T), ckg_race::ATOMIC, CKG_RET);                                  \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                          \
    }                                                                                                      \
    T __tsan_atomic##b##_fetch_add(volatile T *a, T v, int)                                                \
    {                                                                                                      \
        on_access((const void *)a, sizeof(T), ckg_race::ATOMIC, CKG_RET);                                  \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                 \
    }                                                                                                      \
    T __tsan_atomic##b##_exchange(volatile T *a, T v, int)                                                 \
    {                                                                                                      \
        on_access((const void *)a, sizeof(T), ckg_race::ATOMIC, CKG_RET);                                  \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                \
    }                                                                                                      \
    int __tsan_atomic##b##_compare_exchange_strong(volatile T *a, T *c, T v, int, int)                     \
    {                                                                                                      \
        on_access((const void *)a, sizeof(T), ckg_race::ATOMIC, CKG_RET);                                  \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
    }                                                                                                      \
    int __tsan_atomic##b##_compare_exchange_weak(volatile T *a, T *c, T v, int, int)                       \
    {                                                                                                      \
        on_access((const void *)a, sizeof(T), ckg_race::ATOMIC, CKG_RET);                                  \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
    }                                                                                                      \
    T __tsan_atomic##b##_compare_exchange_val(volatile T *a, T c, T v, int, int)                           \
    {                                                                                                      \
        on_access((const void *)a, sizeof(T), ckg_race::ATOMIC, CKG_RET);                                  \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                  \
        return c;                                                                                          \
    }
CKG_TSAN_ATOMIC(8, uint8_t)
CKG_TSAN_ATOMIC(16, uint16_t)
CKG_TSAN_ATOMIC(32, uint32_t)
CKG_TSAN_ATOMIC(64, uint64_t)
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) {}
} // extern "C"
