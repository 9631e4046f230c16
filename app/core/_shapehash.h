/*
 * A line's shape hash: the line with its ASCII digits deleted, hashed 16 bytes at a time.
 * Included by _shapescan.c (one translation unit); `init_simd()` runs at module load.
 */
#ifndef LOGDX_SHAPEHASH_H
#define LOGDX_SHAPEHASH_H

#include <stdint.h>
#include <string.h>

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* Hash of the line with digits deleted. Bytes are compacted (digits skipped) into a small buffer
 * that is hashed 32 bytes at a time (four lanes); the bytes left at the end of a block are carried
 * into the next block, so the hash depends only on the digit-deleted bytes, not on where blocks
 * end.
 * Compaction is 64 bytes per step with AVX-512 VBMI2 (a digit mask, then `vpcompressb`), else 16
 * bytes per step with SSSE3 (a digit mask, then a byte shuffle per 8-byte half from a 256-entry
 * table), else one byte per step, branch-free (the digits of metric lines are random, so a branch
 * would mispredict). All three give the same buffer, hence the same hash; the best one the CPU
 * has is chosen at module load (`best_simd`; `set_simd` changes it for tests). */
#define BLOCK 256
#define TMP_ROOM (BLOCK + 32 + 64) /* carry (< 32) + a block + the slack of whole-vector stores */

static inline size_t compact_scalar(const unsigned char *p, size_t n, unsigned char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        out[k] = c;
        k += (unsigned)(c - '0') >= 10u;
    }
    return k;
}

#define SIMD_NONE 0
#define SIMD_SSSE3 1
#define SIMD_AVX512 2

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_SIMD_COMPACT 1
static uint64_t shuffle_lut[256]; /* non-digit bit mask of 8 bytes -> pshufb indices packing them */
static unsigned char popcount_lut[256];
static int use_simd = SIMD_NONE; /* the compaction in use */

static int best_simd(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi2"))
        return SIMD_AVX512;
    return __builtin_cpu_supports("ssse3") ? SIMD_SSSE3 : SIMD_NONE;
}

static void init_simd(void) {
    for (int m = 0; m < 256; m++) {
        uint64_t idx = 0;
        int k = 0;
        for (int i = 0; i < 8; i++)
            if (m & (1 << i)) idx |= (uint64_t)i << (8 * k++);
        for (int j = k; j < 8; j++) idx |= (uint64_t)0x80 << (8 * j); /* zero the unused bytes */
        shuffle_lut[m] = idx;
        popcount_lut[m] = (unsigned char)k;
    }
    use_simd = best_simd();
}

/* `out` must have room for n + 16 bytes (whole 8-byte stores past the compacted end) */
__attribute__((target("ssse3"))) static size_t compact_simd(const unsigned char *p, size_t n,
                                                            unsigned char *out) {
    const __m128i zero_ch = _mm_set1_epi8('0'), nine = _mm_set1_epi8(9);
    size_t k = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i x = _mm_sub_epi8(v, zero_ch);
        __m128i digit = _mm_cmpeq_epi8(_mm_min_epu8(x, nine), x);
        unsigned keep = ~(unsigned)_mm_movemask_epi8(digit) & 0xFFFFu;
        if (keep == 0xFFFFu) { /* no digit: the common case in text */
            _mm_storeu_si128((__m128i *)(out + k), v);
            k += 16;
            continue;
        }
        unsigned lo = keep & 0xFF, hi = keep >> 8;
        /* the high half's indices are 8 more (an unused 0x80 entry becomes 0x88: still zeroed) */
        __m128i shuf = _mm_set_epi64x((long long)(shuffle_lut[hi] + 0x0808080808080808ULL),
                                      (long long)shuffle_lut[lo]);
        __m128i c = _mm_shuffle_epi8(v, shuf);
        _mm_storel_epi64((__m128i *)(out + k), c);
        k += popcount_lut[lo];
        _mm_storel_epi64((__m128i *)(out + k), _mm_unpackhi_epi64(c, c));
        k += popcount_lut[hi];
    }
    return k + compact_scalar(p + i, n - i, out + k);
}

/* `out` must have room for n + 64 bytes (whole 64-byte stores past the compacted end). The
 * register form of vpcompressb, then a plain store: the memory form is microcoded on some CPUs. */
__attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi2"))) static size_t compact_avx512(
    const unsigned char *p, size_t n, unsigned char *out) {
    const __m512i zero_ch = _mm512_set1_epi8('0'), ten = _mm512_set1_epi8(10);
    size_t k = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i v = _mm512_loadu_si512((const void *)(p + i));
        __mmask64 keep = _mm512_cmpge_epu8_mask(_mm512_sub_epi8(v, zero_ch), ten);
        _mm512_storeu_si512((void *)(out + k), _mm512_maskz_compress_epi8(keep, v));
        k += (size_t)__builtin_popcountll(keep);
    }
    if (i < n) { /* the last 1-63 bytes: a masked load reads nothing past the end */
        __mmask64 live = _bzhi_u64(~0ULL, (unsigned)(n - i));
        __m512i v = _mm512_maskz_loadu_epi8(live, (const void *)(p + i));
        __mmask64 keep = _mm512_cmpge_epu8_mask(_mm512_sub_epi8(v, zero_ch), ten) & live;
        _mm512_storeu_si512((void *)(out + k), _mm512_maskz_compress_epi8(keep, v));
        k += (size_t)__builtin_popcountll(keep);
    }
    return k;
}
#endif

static inline size_t compact(const unsigned char *p, size_t n, unsigned char *out) {
#ifdef HAVE_SIMD_COMPACT
    if (use_simd == SIMD_AVX512) return compact_avx512(p, n, out);
    if (use_simd == SIMD_SSSE3) return compact_simd(p, n, out);
#endif
    return compact_scalar(p, n, out);
}

static inline uint64_t shape_hash(const unsigned char *p, const unsigned char *end) {
    /* four independent lanes, 32 bytes a step: each lane's multiply-xorshift chain waits for its
     * last multiply, so more lanes keep more multiplies in flight (two lanes were the scan's
     * critical path once compaction ran 64 bytes a step) */
    unsigned char tmp[TMP_ROOM];
    uint64_t h0 = 0x9E3779B97F4A7C15ULL, h1 = 0xC2B2AE3D27D4EB4FULL;
    uint64_t h2 = 0x165667B19E3779F9ULL, h3 = 0x27D4EB2F165667C5ULL;
    size_t carry = 0, total = 0;
    const unsigned char *rest = tmp; /* where the carried bytes are */
    while (p < end) {
        size_t n = (size_t)(end - p);
        if (n > BLOCK) n = BLOCK;
        /* the carry (< 32 bytes) to the front: a fixed-size copy (inlined, no memmove call);
         * `rest` is at least 32 bytes past tmp, so the two do not overlap */
        if (rest != tmp) memcpy(tmp, rest, 32);
        size_t k = carry + compact(p, n, tmp + carry);
        p += n;
        size_t full = k & ~(size_t)31;
        for (size_t i = 0; i < full; i += 32) {
            uint64_t w0, w1, w2, w3;
            memcpy(&w0, tmp + i, 8);
            memcpy(&w1, tmp + i + 8, 8);
            memcpy(&w2, tmp + i + 16, 8);
            memcpy(&w3, tmp + i + 24, 8);
            h0 = (h0 ^ w0) * 0x100000001B3ULL;
            h1 = (h1 ^ w1) * 0x100000001B3ULL;
            h2 = (h2 ^ w2) * 0x100000001B3ULL;
            h3 = (h3 ^ w3) * 0x100000001B3ULL;
            h0 ^= h0 >> 29;
            h1 ^= h1 >> 29;
            h2 ^= h2 >> 29;
            h3 ^= h3 >> 29;
        }
        total += full;
        carry = k - full;
        rest = tmp + full;
    }
    uint64_t w[4] = {0, 0, 0, 0}; /* the last 0-31 bytes */
    memcpy(w, rest, carry);
    h0 = (h0 ^ w[0] ^ ((uint64_t)carry << 56)) * 0x100000001B3ULL;
    h1 = (h1 ^ w[1]) * 0x100000001B3ULL;
    h2 = (h2 ^ w[2]) * 0x100000001B3ULL;
    h3 = (h3 ^ w[3]) * 0x100000001B3ULL;
    uint64_t h = mix64(h0 ^ ((h1 << 32) | (h1 >> 32)) ^ (total + carry)) ^ mix64(h2 ^ ((h3 << 17) | (h3 >> 47)));
    return h ? h : 1;
}

#endif
