/*
 * test_gpu_tile.c — the kernels' word-level decode (gpu/ckg_tile.h) against
 * the format accessors of codec/ckc_decode.h, on random planes.  Host only:
 * this is the same code the kernels run, minus the threads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckg_tile.h"

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #c); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

static uint64_t s = 88172645463325252ull;
static uint32_t rnd(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (uint32_t)s; }

static uint32_t word(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

int main(void)
{
    enum { N = 32 * 4096 };
    static uint8_t codes[N / 2 + 64], low[N + 64];
    int checked = 0;
    for (int round = 0; round < 2; round++) {
        for (int is_k15 = 0; is_k15 < 2; is_k15++) {
            ckc_codebook cb;
            for (int c = 0; c < 16; c++)
                cb.sym[c] = c == 15 ? 0 : (uint16_t)(rnd() % (is_k15 ? 512 : 256));
            /* round 0: uniform codes (many escapes), round 1: mostly small codes */
            for (size_t i = 0; i < sizeof codes; i++)
                codes[i] = round == 0 ? (uint8_t)rnd() : (uint8_t)((rnd() % 3) | ((rnd() % 3) << 4));
            for (size_t i = 0; i < sizeof low; i++)
                low[i] = (uint8_t)rnd();
            uint32_t lut[32];
            ckg_make_lut(is_k15, &cb, lut);
            for (uint64_t q = 0; q < N; q += 32) {
                uint32_t c[4], l[8], pr[16];
                for (int i = 0; i < 4; i++)
                    c[i] = word(codes + q / 2 + 4 * i);
                const uint8_t *lp = is_k15 ? low + q / 8 * 7 : low + q;
                for (int i = 0; i < (is_k15 ? 7 : 8); i++)
                    l[i] = word(lp + 4 * i);
                if (is_k15)
                    ckg_k15_pairs32(c, l, lut, pr);
                else
                    ckg_bs_pairs32(c, l, lut, pr);
                unsigned esc = 0;
                for (unsigned j = 0; j < 32; j++) {
                    uint64_t i = q + j;
                    unsigned code = ckc_code_at(codes, i);
                    unsigned sym = code == CKC_ESCAPE ? 0 : cb.sym[code];
                    uint16_t want = ckc_join(is_k15, sym, ckc_low_at(is_k15, low, i));
                    uint16_t got = (uint16_t)(pr[j / 2] >> (16 * (j & 1)));
                    CHECK(got == want, "k15=%d weight %llu: got %04x want %04x", is_k15,
                          (unsigned long long)i, got, want);
                    CHECK(ckg_esc_count_below(c, j) == esc, "count below %u", j);
                    int bit = (ckg_esc_bits8(c[j / 8]) >> (4 * (j % 8) + 3)) & 1;
                    CHECK(bit == (code == CKC_ESCAPE), "escape bit of weight %u", j);
                    esc += code == CKC_ESCAPE;
                    checked++;
                }
                CHECK(ckg_esc_count32(c) == esc, "count32");
                CHECK(ckg_esc_count_below(c, 32) == esc, "count below 32");
            }
        }
    }
    CHECK(ckg_prmt(0x44332211u, 0x88776655u, 0x7351u) == 0x88446622u, "prmt");
    CHECK(ckg_funnel(0x89ABCDEFu, 0x01234567u, 12) == 0x56789ABCu, "funnel");
    printf("gpu_tile: %d weights decoded word-wise equal to ckc_decode.h\n", checked);
    return 0;
}
