// One decoding step of ragmt's autoregressive decoders (the Transformer and the memory model)
// as one C++ call: the computation of models/ort_decoder.py's `_StepGraph`, with int8 matrix
// products and the small operators fused into loops over a few rows.
//
// Why: at batch 1 the ONNX Runtime step is some 200 graph operators of a few microseconds each
// for four rows, where the arithmetic is a tenth of that (docs/decoding-speed.md). Here each
// matrix product reads its int8 weights once for up to four rows, and the layer norms,
// attention, gate, log-softmax and top-k are plain loops.
//
// Int8 products: activations as uint8 with one scale and zero point per row (so a row's output
// never depends on the other rows of its batch), weights as int8 with one scale per output
// channel, sums in int32. With AVX-512 VNNI the sums are exact for full int8 weights; with AVX2
// alone (vpmaddubsw pairs two products into a saturating int16) the weights must be kept to
// -64..64, which `ragmt_weight_limit` tells the caller. Built by models/native_step.py for the
// CPU it runs on (-march=native).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512F__)
#define RAGMT_VNNI 1
#endif

namespace {

constexpr int kBlock = 16;  // output channels a packed weight block holds, 4 inputs each

// Multiply-adds done so far, in the weight products and in attention (`ragmt_counts`): what
// the decoding time is measured against (benchmarks/arithmetic.py). Added once per product or
// per attention call, so the count costs nothing next to the work it counts.
std::atomic<uint64_t> product_macs{0}, attention_macs{0};

inline void count(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace

extern "C" {

// A linear layer `y = x W^T + b` with int8 weights. `w` holds W (n, k) padded to (np, kp),
// packed as (np / 16, kp / 4, 16, 4): for each block of 16 output channels, four consecutive
// inputs of each channel side by side, which is what one VNNI instruction multiplies.
struct QLinear {
    int n, k, np, kp;
    const int8_t* w;
    const float* scale;   // (np) per output channel
    const int32_t* wsum;  // (np) sum of each channel's int8 weights (zero-point correction)
    const float* bias;    // (n) or null
};

struct Norm {
    const float* weight;
    const float* bias;
};

struct Layer {
    Norm self_norm, cross_norm, ffn_norm;
    QLinear qkv;        // self-attention queries, keys and values: n = 3 d
    QLinear self_out;
    QLinear cross_q;    // the source's queries, then with a memory the memory's: n = d or 2 d
    QLinear cross_out;
    QLinear memory_out;        // memory model only
    const float* gate_source;  // (d), memory model only
    float gate_source_bias;
    const float* gate_memory;  // (d)
    QLinear fc1, fc2;
};

struct Model {
    int d, heads, d_head, vocab, n_layers, memory, eos, max_positions;
    float embed_scale;
    const float* embed;      // (vocab, d) float, the embedding rows a step reads
    const float* positions;  // (max_positions, d)
    const Layer* layers;
    Norm final_norm;
    QLinear output;  // (vocab, d), no bias
};

// One step's inputs and outputs: see `_StepGraph` for their meaning. Rows = groups * beams.
// Every layer's tensors are stacked in one array, the sentence (or row) axis first, so that
// dropping finished sentences compacts one array, and a call passes a dozen pointers.
struct StepIO {
    int rows, groups, past_rows, past, src, mem, n_best, n_ban;
    int ldk_src, ldk_mem;  // the transposed keys' padded lengths (multiples of 16)
    int threads;           // at most this many threads, each a share of the sentences
    int64_t position;
    const int64_t* tokens;    // (rows)
    const int64_t* order;     // (rows): the past row each row continues
    const int64_t* ban;       // (rows, n_ban): tokens a row may not emit
    const float* src_bias;    // (groups, src)
    const float* mem_bias;    // (groups, mem)
    const float* has_memory;  // (groups)
    // Keys and values so far, never moved: those of position p made by the row in slot s lie
    // at store[p][s], and each row's `history` names, position by position, the slot its
    // ancestor held. A step copies row histories (a few ints) instead of every row's keys and
    // values (what the step graph's Concat does at every step).
    int slots, capacity;
    float* store;             // (capacity, slots, layers, 2, heads, d_head)
    const int32_t* history;   // (past_rows, capacity): the last step's rows
    int32_t* new_history;     // (rows, capacity)
    // The source's and the memory's keys and values in IEEE half precision: a batch of 32
    // sentences' memories is tens of megabytes a step, read from main memory, in 32 bits.
    const uint16_t* cross_kt;  // (groups, layers, heads, d_head, ldk_src): keys transposed
    const uint16_t* cross_v;   // (groups, layers, heads, src, d_head)
    const uint16_t* mem_kt;    // (groups, layers, heads, d_head, ldk_mem)
    const uint16_t* mem_v;     // (groups, layers, heads, mem, d_head)
    float* best_lp;           // (rows, n_best)
    int64_t* best_ids;        // (rows, n_best)
    float* eos_lp;            // (rows)
    float* gate;              // (rows), memory model only
    // Each sentence's own keys, the first of its `src` (`mem`): the rest pad it to the
    // batch's longest, and attention passes them over rather than masking them.
    const int32_t* src_len;   // (groups)
    const int32_t* mem_len;   // (groups), memory model only
    // Which sentence of the per-sentence arrays each group is (groups); null: group g is
    // sentence g. Beam search drops finished sentences by leaving them out of it.
    const int32_t* sentence_of;
};

int ragmt_isa() {
#if defined(RAGMT_VNNI)
    return 2;
#elif defined(__AVX2__)
    return 1;
#else
    return 0;
#endif
}

// The multiply-adds counted since the library was loaded: [0] weight products, [1] attention.
void ragmt_counts(uint64_t* out) {
    out[0] = product_macs.load(std::memory_order_relaxed);
    out[1] = attention_macs.load(std::memory_order_relaxed);
}

// The largest int8 weight magnitude whose products this build sums exactly.
int ragmt_weight_limit() {
#if defined(RAGMT_VNNI) || !defined(__AVX2__)
    return 127;
#else
    return 64;
#endif
}

}  // extern "C"

namespace {

// --------------------------------------------------------------------------- int8 products

// 16 floats as one value (GCC/Clang vector extension): one AVX-512 register, or two AVX2 ones.
typedef float f16 __attribute__((vector_size(64)));

inline f16 load16(const float* p) {
    f16 v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

// The smallest and largest of x[0..n) and 0, with vectors (GCC leaves std::min/std::max
// reductions as scalar loops).
inline void range_of(const float* x, int n, float& lo, float& hi) {
    f16 low = {}, high = {};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const f16 v = load16(x + i);
        low = v < low ? v : low;
        high = v > high ? v : high;
    }
    lo = hi = 0.f;
    for (int j = 0; j < 16; ++j) {
        lo = std::min(lo, low[j]);
        hi = std::max(hi, high[j]);
    }
    for (; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
}

// Rows `a` (rows, kp) quantized as uint8, each with its own scale and zero point.
void quantize_rows(const float* x, int rows, int k, int ldx, int kp, uint8_t* a, float* scale,
                   int32_t* zero) {
    for (int r = 0; r < rows; ++r) {
        const float* xr = x + (size_t)r * ldx;
        float lo, hi;
        range_of(xr, k, lo, hi);
        float s = (hi - lo) / 255.f;
        if (s == 0.f) s = 1.f;
        int zp = (int)std::nearbyint(-lo / s);
        zp = std::min(255, std::max(0, zp));
        float inv = 1.f / s;
        uint8_t* ar = a + (size_t)r * kp;
        for (int i = 0; i < k; ++i) {
            int q = (int)std::nearbyint(xr[i] * inv) + zp;
            ar[i] = (uint8_t)std::min(255, std::max(0, q));
        }
        for (int i = k; i < kp; ++i) ar[i] = 0;  // the padded weights are 0: any value will do
        scale[r] = s;
        zero[r] = zp;
    }
}

inline int32_t load4(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

#if defined(RAGMT_VNNI)
// R rows by C blocks of 16 channels, int32 sums into `out` (rows, ldo).
template <int R, int C>
void kernel(const uint8_t* a, int lda, const int8_t* wb, int kq, int32_t* out, int ldo) {
    __m512i acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_si512();
    for (int q = 0; q < kq; ++q) {
        __m512i b[C];
        for (int c = 0; c < C; ++c) b[c] = _mm512_loadu_si512(wb + ((size_t)c * kq + q) * 64);
        for (int r = 0; r < R; ++r) {
            __m512i av = _mm512_set1_epi32(load4(a + (size_t)r * lda + 4 * q));
            for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], av, b[c]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
            _mm512_storeu_si512(out + (size_t)r * ldo + c * kBlock, acc[r][c]);
}
// Rows a kernel call takes at most, and blocks of 16 channels it keeps in registers for more
// than four rows and for up to four (a sentence's beams): sixteen sums in registers either
// way, the fastest shapes measured.
constexpr int kRows = 8, kColsWide = 2, kColsNarrow = 4;

// `kernel` for R <= 4 rows whose activations are interleaved: the four bytes of step q of row
// r at ai[(q * R + r) * 4]. With each row at a fixed offset from one pointer GCC keeps every
// address in a register; with a pointer per row (and one per block of weights) it ran out of
// them, spilled a weight vector and reloaded row pointers at every step. Timed in turns
// against `kernel`, four rows took 0.86-0.93x the time, and 0.73-0.85x of that again with
// the weights kept in registers (`dpbusd_registers`). `kernel` still takes more rows, where
// GCC keeps the weights in registers itself.
// acc += a (unsigned bytes) . b (signed bytes), with b in a register: left to the intrinsic,
// GCC folds the load of b into each row's instruction, which read each weight vector from
// the cache once per row and made four rows wait on loads.
inline __m512i dpbusd_registers(__m512i acc, __m512i a, __m512i b) {
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

template <int R, int C>
void kernel_interleaved(const uint8_t* ai, const int8_t* wb, int kq, int32_t* out, int ldo) {
    __m512i acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_si512();
    const size_t stride = (size_t)kq * 64;  // from one block of weights to the next
    for (int q = 0; q < kq; ++q, ai += 4 * R, wb += 64) {
        __m512i b[C];
        for (int c = 0; c < C; ++c) b[c] = _mm512_loadu_si512(wb + c * stride);
        for (int r = 0; r < R; ++r) {
            const __m512i av = _mm512_set1_epi32(load4(ai + 4 * r));
            for (int c = 0; c < C; ++c) acc[r][c] = dpbusd_registers(acc[r][c], av, b[c]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c)
            _mm512_storeu_si512(out + (size_t)r * ldo + c * kBlock, acc[r][c]);
}

// R <= 4 interleaved rows by the channel blocks nb0 .. nb0 + count (see `row_kernels`).
template <int R>
void interleaved_kernels(const uint8_t* ai, const int8_t* w, int kq, int nb0, int count,
                         int32_t* out, int ldo) {
    int c = 0;
    for (; c + kColsNarrow <= count; c += kColsNarrow)
        kernel_interleaved<R, kColsNarrow>(ai, w + (size_t)(nb0 + c) * kq * 64, kq,
                                           out + c * kBlock, ldo);
    for (; c < count; ++c)
        kernel_interleaved<R, 1>(ai, w + (size_t)(nb0 + c) * kq * 64, kq, out + c * kBlock, ldo);
}
#elif defined(__AVX2__)
template <int R, int C>
void kernel(const uint8_t* a, int lda, const int8_t* wb, int kq, int32_t* out, int ldo) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i lo[R][C], hi[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) lo[r][c] = hi[r][c] = _mm256_setzero_si256();
    for (int q = 0; q < kq; ++q) {
        __m256i bl[C], bh[C];
        for (int c = 0; c < C; ++c) {
            const int8_t* p = wb + ((size_t)c * kq + q) * 64;
            bl[c] = _mm256_loadu_si256((const __m256i*)p);
            bh[c] = _mm256_loadu_si256((const __m256i*)(p + 32));
        }
        for (int r = 0; r < R; ++r) {
            __m256i av = _mm256_set1_epi32(load4(a + (size_t)r * lda + 4 * q));
            for (int c = 0; c < C; ++c) {
                lo[r][c] = _mm256_add_epi32(
                    lo[r][c], _mm256_madd_epi16(_mm256_maddubs_epi16(av, bl[c]), ones));
                hi[r][c] = _mm256_add_epi32(
                    hi[r][c], _mm256_madd_epi16(_mm256_maddubs_epi16(av, bh[c]), ones));
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            int32_t* o = out + (size_t)r * ldo + c * kBlock;
            _mm256_storeu_si256((__m256i*)o, lo[r][c]);
            _mm256_storeu_si256((__m256i*)(o + 8), hi[r][c]);
        }
}
constexpr int kRows = 4, kColsWide = 1, kColsNarrow = 1;  // 8 sums in 16 registers
#else
template <int R, int C>
void kernel(const uint8_t* a, int lda, const int8_t* w, int kq, int32_t* out, int ldo) {
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            const int8_t* wb = w + (size_t)c * kq * 64;
            int32_t* o = out + (size_t)r * ldo + c * kBlock;
            for (int j = 0; j < kBlock; ++j) o[j] = 0;
            for (int q = 0; q < kq; ++q)
                for (int j = 0; j < kBlock; ++j)
                    for (int i = 0; i < 4; ++i)
                        o[j] += (int32_t)a[(size_t)r * lda + 4 * q + i] * wb[q * 64 + j * 4 + i];
        }
}
constexpr int kRows = 4, kColsWide = 1, kColsNarrow = 1;
#endif

// R rows by the channel blocks nb0 .. nb0 + count, their sums into `out` (R, ldo) from
// column 0.
template <int R>
void row_kernels(const uint8_t* a, int lda, const int8_t* w, int kq, int nb0, int count,
                 int32_t* out, int ldo) {
    constexpr int C = R > 4 ? kColsWide : kColsNarrow;
    int c = 0;
    for (; c + C <= count; c += C)
        kernel<R, C>(a, lda, w + (size_t)(nb0 + c) * kq * 64, kq, out + c * kBlock, ldo);
    for (; c < count; ++c)
        kernel<R, 1>(a, lda, w + (size_t)(nb0 + c) * kq * 64, kq, out + c * kBlock, ldo);
}

// A buffer that only grows, `n` elements long at least. Buffers are kept from step to step
// (`Workspace`): fresh megabytes (a wide step's logits) are mapped and faulted in page by
// page, which took longer than the products themselves.
template <typename T>
T* room(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

struct Scratch {
    std::vector<uint8_t> a, interleaved;
    std::vector<float> scale;
    std::vector<int32_t> zero;
};

// Output channels a pass over every row takes: their weights (32 KB for 256 inputs) stay in
// the near caches while each block of rows reads them, so a wide batch reads the weights from
// memory once, not once per block of rows.
constexpr int kPanel = 8 * kBlock;

// The kernels for `rr` <= R rows.
template <int R>
void some_rows(int rr, const uint8_t* a, int lda, const int8_t* w, int kq, int nb0, int count,
               int32_t* out, int ldo) {
    if constexpr (R > 1) {
        if (rr < R) return some_rows<R - 1>(rr, a, lda, w, kq, nb0, count, out, ldo);
    }
    row_kernels<R>(a, lda, w, kq, nb0, count, out, ldo);
}

// y (rows, ldy) = x (rows, ldx) W^T + b, through int8. Each block of rows' sums for a panel are
// turned into floats at once, from a tile that stays in registers and the first-level cache.
void qlinear(const QLinear& L, const float* x, int rows, int ldx, float* y, int ldy,
             Scratch& s) {
    count(product_macs, (uint64_t)rows * L.k * L.n);
    uint8_t* qa = room(s.a, (size_t)rows * L.kp);
    float* sa = room(s.scale, rows);
    int32_t* za = room(s.zero, rows);
    quantize_rows(x, rows, L.k, ldx, L.kp, qa, sa, za);
    const int kq = L.kp / 4, nblocks = L.np / kBlock, panel = kPanel / kBlock;
#if defined(RAGMT_VNNI)
    // the last block of rows, when it is two to four (a sentence's beams, or what a batch
    // leaves after blocks of eight), interleaved for `kernel_interleaved`
    const int tail = rows % kRows, tail_r0 = rows - tail;
    uint8_t* ai = nullptr;
    if (tail >= 2 && tail <= 4) {
        ai = room(s.interleaved, (size_t)kq * tail * 4);
        const uint8_t* at = qa + (size_t)tail_r0 * L.kp;
        for (int q = 0; q < kq; ++q)
            for (int r = 0; r < tail; ++r)
                std::memcpy(ai + ((size_t)q * tail + r) * 4, at + (size_t)r * L.kp + 4 * q, 4);
    }
#endif
    alignas(64) int32_t tile[kRows * kPanel];
    for (int nb = 0; nb < nblocks; nb += panel) {
        const int count = std::min(panel, nblocks - nb);
        const int j0 = nb * kBlock, j1 = std::min(L.n, j0 + count * kBlock);
        for (int r0 = 0; r0 < rows; r0 += kRows) {
            const uint8_t* a = qa + (size_t)r0 * L.kp;
            const int rr = std::min(kRows, rows - r0);
#if defined(RAGMT_VNNI)
            if (ai != nullptr && r0 == tail_r0) {
                switch (rr) {
                    case 2: interleaved_kernels<2>(ai, L.w, kq, nb, count, tile, kPanel); break;
                    case 3: interleaved_kernels<3>(ai, L.w, kq, nb, count, tile, kPanel); break;
                    default: interleaved_kernels<4>(ai, L.w, kq, nb, count, tile, kPanel);
                }
            } else {
                some_rows<kRows>(rr, a, L.kp, L.w, kq, nb, count, tile, kPanel);
            }
#else
            some_rows<kRows>(rr, a, L.kp, L.w, kq, nb, count, tile, kPanel);
#endif
            for (int r = 0; r < rr; ++r) {
                const float sr = sa[r0 + r];
                const int32_t zr = za[r0 + r];
                const int32_t* t = tile + r * kPanel - j0;
                float* yr = y + (size_t)(r0 + r) * ldy;
                if (L.bias) {
                    for (int j = j0; j < j1; ++j)
                        yr[j] = sr * L.scale[j] * (float)(t[j] - zr * L.wsum[j]) + L.bias[j];
                } else {
                    for (int j = j0; j < j1; ++j)
                        yr[j] = sr * L.scale[j] * (float)(t[j] - zr * L.wsum[j]);
                }
            }
        }
    }
}

// --------------------------------------------------------------------------- float parts

// IEEE half precision to float, where the CPU has no instruction for it.
inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000 | (man << 13);  // inf, NaN
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: shifted until its leading bit is the implicit one
        int shift = 0;
        do {
            ++shift;
            man <<= 1;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t)(113 - shift) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// 16 halves as floats.
inline f16 load16h(const uint16_t* p) {
    f16 v;
#if defined(__AVX512F__)
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
    std::memcpy(&v, &x, 64);
#elif defined(__F16C__)
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(p + 8)));
    std::memcpy(&v, &lo, 32);
    std::memcpy((char*)&v + 32, &hi, 32);
#else
    for (int i = 0; i < 16; ++i) v[i] = half_to_float(p[i]);
#endif
    return v;
}

// The largest of x[0..n). Written with vectors: GCC leaves an `omp simd` max reduction
// (std::max's NaN rule) as a scalar loop, which made finding the vocabulary's largest logit
// take longer than its log-softmax.
inline float max_of(const float* x, int n) {
    f16 most = {};
    most -= INFINITY;
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        const f16 v = load16(x + j);
        most = v > most ? v : most;
    }
    float top = -INFINITY;
    for (int i = 0; i < 16; ++i) top = std::max(top, most[i]);
    for (; j < n; ++j) top = std::max(top, x[j]);
    return top;
}

// Whether any of the 16 floats at x exceeds `bound`.
inline bool any_above(const float* x, float bound) {
#if defined(__AVX512F__)
    return _mm512_cmp_ps_mask(_mm512_loadu_ps(x), _mm512_set1_ps(bound), _CMP_GT_OQ) != 0;
#elif defined(__AVX2__)
    const __m256 b = _mm256_set1_ps(bound);
    const __m256 gt = _mm256_or_ps(_mm256_cmp_ps(_mm256_loadu_ps(x), b, _CMP_GT_OQ),
                                   _mm256_cmp_ps(_mm256_loadu_ps(x + 8), b, _CMP_GT_OQ));
    return _mm256_movemask_ps(gt) != 0;
#else
    bool any = false;
    for (int j = 0; j < 16; ++j) any |= x[j] > bound;
    return any;
#endif
}

void layer_norm(const Norm& n, const float* x, int rows, int d, float* y) {
    for (int r = 0; r < rows; ++r) {
        const float* xr = x + (size_t)r * d;
        float* yr = y + (size_t)r * d;
        float mean = 0.f;
#pragma omp simd reduction(+ : mean)
        for (int i = 0; i < d; ++i) mean += xr[i];
        mean /= d;
        float var = 0.f;
#pragma omp simd reduction(+ : var)
        for (int i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
        const float inv = 1.f / std::sqrt(var / d + 1e-5f);
        for (int i = 0; i < d; ++i) yr[i] = (xr[i] - mean) * inv * n.weight[i] + n.bias[i];
    }
}

// Sums are written as `omp simd` reductions (-fopenmp-simd): without them the compiler keeps
// IEEE order and adds one product at a time, and attention's 64-wide dot products were most of
// a step.
inline float dot(const float* a, const float* b, int n) {
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

// e^x for x <= 0 (softmax's shifted logits), to about 2e-7 relative: 2^(x log2 e) as an exponent
// and a degree-6 polynomial of the fraction. Unlike std::exp it vectorizes, and the vocabulary's
// log-softmax is 8,000 of them a row.
inline float exp_neg(float x) {
    x = std::max(x, -87.f);
    const float t = x * 1.44269504089f;
    const float fi = std::floor(t);
    const float f = t - fi;
    float p = 1.5353362e-4f;
    p = p * f + 1.3398874e-3f;
    p = p * f + 9.6180325e-3f;
    p = p * f + 5.5503406e-2f;
    p = p * f + 2.4022648e-1f;
    p = p * f + 6.9314720e-1f;
    p = p * f + 1.0f;
    int32_t bits = ((int32_t)fi + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    return p * scale;
}

// Softmax of `len` scores in place, to weights that sum to 1.
void softmax(float* s, int len) {
    const float top = max_of(s, len);
    float total = 0.f;
#pragma omp simd reduction(+ : total)
    for (int j = 0; j < len; ++j) {
        s[j] = exp_neg(s[j] - top);
        total += s[j];
    }
    const float inv = 1.f / total;
    for (int j = 0; j < len; ++j) s[j] *= inv;
}

constexpr int kKeys = 16;  // keys per vector of scores; the transposed keys are padded to it
constexpr int kMaxChunks = 16;  // heads up to 256 wide: a self-attention row's sum in registers

// NB rows' attention (NB beams of one sentence, or NB of its tokens, one head) to its first
// `len` keys (len >= 1): queries `q` (row r at q + r * ldq), keys transposed `kt` (Dh, ldk),
// values `vs` (len, Dh), as floats or halves, scores in `sr` (NB, ldk); Dh a multiple of 16. Each key and value is loaded once for all NB rows, and the NB sums in flight
// hide the adds' latency.
inline f16 load16v(const float* p) { return load16(p); }
inline f16 load16v(const uint16_t* p) { return load16h(p); }

// Scores of `NB` query rows for the `C` chunks of 16 keys from `j0`: C x NB sums in registers,
// each a chain of `dh` adds in the order of one chunk alone (so the scores are the same).
template <int NB, int C, typename T>
inline void score_chunks(const float* q, int ldq, const T* kt, int ldk, int j0, int dh,
                         float* sr) {
    f16 acc[NB][C] = {};
    for (int i = 0; i < dh; ++i) {
        f16 row[C];
        for (int c = 0; c < C; ++c) row[c] = load16v(kt + (size_t)i * ldk + j0 + c * kKeys);
        for (int r = 0; r < NB; ++r) {
            const float qi = q[(size_t)r * ldq + i];
            for (int c = 0; c < C; ++c) acc[r][c] += qi * row[c];
        }
    }
    for (int r = 0; r < NB; ++r)
        for (int c = 0; c < C; ++c)
            std::memcpy(sr + (size_t)r * ldk + j0 + c * kKeys, &acc[r][c], 64);
}

// The weighted values of `NB` rows for the `C` chunks of 16 dimensions from `i0`, each a sum
// over the keys in order.
template <int NB, int C, typename T>
inline void weigh_chunks(const float* sr, int ldk, const T* vs, int len, int dh, int i0,
                         float* out, int ldo) {
    f16 o[NB][C] = {};
    for (int j = 0; j < len; ++j) {
        f16 v[C];
        for (int c = 0; c < C; ++c) v[c] = load16v(vs + (size_t)j * dh + i0 + c * kKeys);
        for (int r = 0; r < NB; ++r) {
            const float p = sr[(size_t)r * ldk + j];
            for (int c = 0; c < C; ++c) o[r][c] += p * v[c];
        }
    }
    for (int r = 0; r < NB; ++r)
        for (int c = 0; c < C; ++c) std::memcpy(out + (size_t)r * ldo + i0 + c * kKeys, &o[r][c], 64);
}

// Attention of `NB` query rows to `len` keys (transposed, `ldk` apart) and their values. Two
// chunks of keys and up to four of dimensions at a time: one chunk's sums for four rows are
// four chains of adds, each waiting on the last, and the cached keys and values are read
// from memory as the sums wait (a batch's memories are megabytes a step).
template <int NB, typename T>
void attend_rows(const float* q, int ldq, const T* kt, int ldk, const T* vs,
                 const float* bias, int len, int dh, float scale, float* sr, float* out,
                 int ldo) {
    int j0 = 0;  // scores past `len` are made, never read
    for (; j0 + kKeys < len; j0 += 2 * kKeys) score_chunks<NB, 2>(q, ldq, kt, ldk, j0, dh, sr);
    if (j0 < len) score_chunks<NB, 1>(q, ldq, kt, ldk, j0, dh, sr);
    for (int r = 0; r < NB; ++r) {
        float* s = sr + (size_t)r * ldk;
        for (int j = 0; j < len; ++j) s[j] = s[j] * scale + (bias ? bias[j] : 0.f);
        softmax(s, len);
    }
    int i0 = 0;
    for (; i0 + 4 * kKeys <= dh; i0 += 4 * kKeys)
        weigh_chunks<NB, 4>(sr, ldk, vs, len, dh, i0, out, ldo);
    switch ((dh - i0) / kKeys) {
        case 3: weigh_chunks<NB, 3>(sr, ldk, vs, len, dh, i0, out, ldo); break;
        case 2: weigh_chunks<NB, 2>(sr, ldk, vs, len, dh, i0, out, ldo); break;
        case 1: weigh_chunks<NB, 1>(sr, ldk, vs, len, dh, i0, out, ldo); break;
        default: break;
    }
}

// `attend_rows` for `nb` (1 to 4) rows.
template <typename T>
void attend_some(int nb, const float* q, int ldq, const T* kt, int ldk, const T* vs,
                 const float* bias, int len, int dh, float scale, float* sr, float* out,
                 int ldo) {
    switch (nb) {
        case 4: attend_rows<4>(q, ldq, kt, ldk, vs, bias, len, dh, scale, sr, out, ldo); break;
        case 3: attend_rows<3>(q, ldq, kt, ldk, vs, bias, len, dh, scale, sr, out, ldo); break;
        case 2: attend_rows<2>(q, ldq, kt, ldk, vs, bias, len, dh, scale, sr, out, ldo); break;
        default: attend_rows<1>(q, ldq, kt, ldk, vs, bias, len, dh, scale, sr, out, ldo);
    }
}

// Attention of each row's query to its sentence's keys/values: `keys_t` (groups, H, Dh, ldk),
// transposed (and padded with zero keys to `ldk`, a multiple of 16) once per sentence, so that
// scores for 16 keys are plain vector products with no horizontal sums (which, with the adds'
// latency, were most of a step); `values` (groups, H, len, Dh). A sentence's beams, four at a
// time, read each key and value once, and only its own `lens[s]` keys: in a batch the others
// pad it to the longest sentence (a memory's lengths differ tenfold). A sentence without keys
// gets zeros. Group g's rows read sentence `which[g]` of the per-sentence arrays.
void grouped_attention(const Model& m, int layer, const float* q, int ldq,
                       const uint16_t* keys_t, int ldk, const uint16_t* values, const float* bias,
                       int len, const int32_t* lens, const int32_t* which, int rows, int groups,
                       std::vector<float>& w, float* out) {
    const int per = rows / groups, dh = m.d_head, H = m.heads, L = m.n_layers;
    const float scale = 1.f / std::sqrt((float)dh);
    w.resize((size_t)4 * ldk);
    uint64_t keys = 0;
    for (int g = 0; g < groups; ++g) keys += lens[which[g]];
    count(attention_macs, keys * per * m.d * 2);  // scores and the weighted values
    for (int g = 0; g < groups; ++g)
        for (int h = 0; h < H; ++h) {
            const int sentence = which[g];
            const size_t head = ((size_t)sentence * L + layer) * H + h;
            const uint16_t* kt = keys_t + head * dh * ldk;
            const uint16_t* vs = values + head * len * dh;
            const float* b = bias ? bias + (size_t)sentence * len : nullptr;
            const int n = lens[sentence];
            for (int r0 = 0; r0 < per; r0 += 4) {
                const float* qr = q + (size_t)(g * per + r0) * ldq + h * dh;
                float* o = out + (size_t)(g * per + r0) * m.d + h * dh;
                float* ws = w.data();
                const int nb = std::min(4, per - r0);
                if (n == 0) {
                    for (int r = 0; r < nb; ++r) std::fill_n(o + (size_t)r * m.d, dh, 0.f);
                    continue;
                }
                attend_some(nb, qr, ldq, kt, ldk, vs, b, n, dh, scale, ws, o, m.d);
            }
        }
}

// A step's buffers, kept from step to step (see `room`).
struct Workspace {
    Scratch scratch;
    std::vector<float> x, h, y, qkv, ctx, cq, cs, cm, gates, ffn, logits, w;
    std::vector<float> xs, ns, kv;  // the memory encoder's retrieved sources, and a context's
};

// Workspaces not in use, for the next step on any thread: the threads that share a wide step
// are new at each step, and their own fresh buffers were as slow as the step's arithmetic.
std::mutex spare_mutex;
std::vector<std::unique_ptr<Workspace>> spare;

// One workspace for as long as it lives, then back to the spares.
struct Lease {
    std::unique_ptr<Workspace> ws;
    Lease() {
        std::lock_guard<std::mutex> hold(spare_mutex);
        if (spare.empty()) {
            ws = std::make_unique<Workspace>();
        } else {
            ws = std::move(spare.back());
            spare.pop_back();
        }
    }
    ~Lease() {
        std::lock_guard<std::mutex> hold(spare_mutex);
        spare.push_back(std::move(ws));
    }
};

// Sentences 0..count split between up to `threads` threads, `part(first, end)` run on each
// share, this thread taking the first. Each row is quantized alone, so no sentence's result
// depends on the split.
template <typename F>
void in_parts(int count, int threads, const F& part) {
    const int parts = std::max(1, std::min(threads, count));
    std::vector<std::thread> workers;
    for (int k = 1; k < parts; ++k)
        workers.emplace_back([&part, k, count, parts] {
            part(count * k / parts, count * (k + 1) / parts);
        });
    part(0, count / parts);
    for (std::thread& w : workers) w.join();
}

// The pre-norm feed-forward sublayer in place: x += fc2(relu(fc1(norm(x)))).
void feed_forward(const Norm& norm, const QLinear& fc1, const QLinear& fc2, float* x, int rows,
                  int d, Workspace& ws) {
    const size_t rd = (size_t)rows * d, inner = (size_t)rows * fc1.n;
    float* h = room(ws.h, rd);
    float* y = room(ws.y, rd);
    float* ffn = room(ws.ffn, inner);
    layer_norm(norm, x, rows, d, h);
    qlinear(fc1, h, rows, d, ffn, fc1.n, ws.scratch);
    for (size_t i = 0; i < inner; ++i) ffn[i] = std::max(ffn[i], 0.f);
    qlinear(fc2, ffn, rows, fc1.n, y, d, ws.scratch);
    for (size_t i = 0; i < rd; ++i) x[i] += y[i];
}

// Attention of `nq` query rows (`q`, stride `ldq`) to `nk` >= 1 rows of keys (at `kv`) and
// values (at `kv + d`, stride `ldkv`), every head, into `ctx` (nq, d). Each head's keys are
// transposed into the workspace first (see `attend_rows`).
void attend_block(const float* q, int ldq, int nq, const float* kv, int ldkv, int nk, int d,
                  int heads, int dh, float* ctx, Workspace& ws) {
    const int ldk = (nk + kKeys - 1) / kKeys * kKeys;
    float* kt = room(ws.cq, (size_t)dh * ldk);
    float* vs = room(ws.cs, (size_t)nk * dh);
    float* sr = room(ws.w, (size_t)4 * ldk);
    const float scale = 1.f / std::sqrt((float)dh);
    count(attention_macs, (uint64_t)nq * nk * d * 2);
    for (int hd = 0; hd < heads; ++hd) {
        std::fill_n(kt, (size_t)dh * ldk, 0.f);
        for (int j = 0; j < nk; ++j) {
            const float* k = kv + (size_t)j * ldkv + hd * dh;
            for (int i = 0; i < dh; ++i) kt[(size_t)i * ldk + j] = k[i];
            std::memcpy(vs + (size_t)j * dh, k + d, sizeof(float) * dh);
        }
        for (int r0 = 0; r0 < nq; r0 += 4)
            attend_some(std::min(4, nq - r0), q + (size_t)r0 * ldq + hd * dh, ldq, kt, ldk, vs,
                        nullptr, nk, dh, scale, sr, ctx + (size_t)r0 * d + hd * dh, d);
    }
}

// The step for sentences g0..g1 of `all` (their rows r0.. = g0 * beams..), histories made.
void step_rows(const Model& m, const StepIO& all, int g0, int g1) {
    const int per = all.rows / all.groups, r0 = g0 * per;
    StepIO part = all;  // the same step, its per-row arrays and sentence map offset to g0
    StepIO* io = &part;
    part.rows = (g1 - g0) * per;
    part.groups = g1 - g0;
    part.tokens += r0;
    part.ban += (size_t)r0 * all.n_ban;
    part.sentence_of += g0;
    if (m.memory) part.gate += r0;
    part.new_history += (size_t)r0 * all.capacity;
    part.best_lp += (size_t)r0 * all.n_best;
    part.best_ids += (size_t)r0 * all.n_best;
    part.eos_lp += r0;
    const int rows = part.rows, d = m.d, dh = m.d_head, H = m.heads;
    const size_t kv_row = (size_t)m.n_layers * 2 * m.heads * m.d_head;  // one slot, position
    const int t = io->past + 1;
    Lease lease;
    Workspace& ws = *lease.ws;
    Scratch& s = ws.scratch;
    std::vector<float>& w = ws.w;
    const size_t rd = (size_t)rows * d;
    float* x = room(ws.x, rd);
    float* h = room(ws.h, rd);
    float* y = room(ws.y, rd);
    float* qkv = room(ws.qkv, 3 * rd);
    float* ctx = room(ws.ctx, rd);
    float* cq = room(ws.cq, 2 * rd);
    float* cs = room(ws.cs, rd);
    float* cm = room(ws.cm, rd);
    float* gates = room(ws.gates, rows);
    std::fill(gates, gates + rows, 0.f);

    for (int r = 0; r < rows; ++r) {
        const float* e = m.embed + (size_t)io->tokens[r] * d;
        const float* p = m.positions + (size_t)io->position * d;
        for (int i = 0; i < d; ++i) x[(size_t)r * d + i] = e[i] * m.embed_scale + p[i];
    }
    const float scale = 1.f / std::sqrt((float)dh);
    for (int l = 0; l < m.n_layers; ++l) {
        const Layer& L = m.layers[l];
        // self-attention, the keys/values so far reordered by `order` and extended
        layer_norm(L.self_norm, x, rows, d, h);
        qlinear(L.qkv, h, rows, d, qkv, 3 * d, s);
        // this position's keys and values into each row's own slot, then attention over the
        // row's history
        for (int r = 0; r < rows; ++r) {
            float* at =
                io->store + ((size_t)io->past * io->slots + r0 + r) * kv_row + (size_t)l * 2 * d;
            std::memcpy(at, qkv + (size_t)r * 3 * d + d, sizeof(float) * 2 * d);
        }
        w.resize(t);
        count(attention_macs, (uint64_t)rows * t * d * 2);
        for (int r = 0; r < rows; ++r) {
            const int32_t* hist = io->new_history + (size_t)r * io->capacity;
            for (int hd = 0; hd < H; ++hd) {
                const float* q = qkv + (size_t)r * 3 * d + hd * dh;
                float top = -INFINITY;
                for (int p = 0; p < t; ++p) {
                    const float* k = io->store + ((size_t)p * io->slots + hist[p]) * kv_row +
                                     (size_t)l * 2 * d + hd * dh;
                    w[p] = dot(q, k, dh) * scale;
                    top = std::max(top, w[p]);
                }
                float total = 0.f;
                for (int p = 0; p < t; ++p) {
                    w[p] = exp_neg(w[p] - top);
                    total += w[p];
                }
                const float inv = 1.f / total;
                f16 o[kMaxChunks] = {};
                const int chunks = dh / kKeys;
                for (int p = 0; p < t; ++p) {
                    const float* v = io->store + ((size_t)p * io->slots + hist[p]) * kv_row +
                                     (size_t)l * 2 * d + d + hd * dh;
                    const float pw = w[p] * inv;
                    for (int c = 0; c < chunks; ++c) o[c] += pw * load16(v + c * kKeys);
                }
                std::memcpy(ctx + (size_t)r * d + hd * dh, o, sizeof(float) * dh);
            }
        }
        qlinear(L.self_out, ctx, rows, d, y, d, s);
        for (size_t i = 0; i < rd; ++i) x[i] += y[i];

        // cross-attention to the source (and the memory, mixed by the gate)
        layer_norm(L.cross_norm, x, rows, d, h);
        const int nq = L.cross_q.n;  // d, or 2 d with a memory
        qlinear(L.cross_q, h, rows, d, cq, nq, s);
        grouped_attention(m, l, cq, nq, io->cross_kt, io->ldk_src, io->cross_v,
                          io->src_bias, io->src, io->src_len, io->sentence_of, rows, io->groups, w,
                          ctx);
        qlinear(L.cross_out, ctx, rows, d, cs, d, s);
        if (m.memory) {
            grouped_attention(m, l, cq + d, nq, io->mem_kt, io->ldk_mem, io->mem_v,
                              io->mem_bias, io->mem, io->mem_len, io->sentence_of, rows,
                              io->groups, w, ctx);
            qlinear(L.memory_out, ctx, rows, d, cm, d, s);
            const int per = rows / io->groups;
            for (int r = 0; r < rows; ++r) {
                float* c_s = cs + (size_t)r * d;
                float* c_m = cm + (size_t)r * d;
                float g = 1.f;
                if (io->has_memory[io->sentence_of[r / per]] != 0.f) {
                    const float z = dot(L.gate_source, c_s, d) + L.gate_source_bias +
                                    dot(L.gate_memory, c_m, d);
                    g = 1.f / (1.f + std::exp(-z));
                } else {
                    for (int i = 0; i < d; ++i) c_m[i] = 0.f;  // no memory: gate 1, exactly
                }
                gates[r] += g;
                float* xr = x + (size_t)r * d;
                for (int i = 0; i < d; ++i) xr[i] += c_m[i] + g * (c_s[i] - c_m[i]);
            }
        } else {
            for (size_t i = 0; i < rd; ++i) x[i] += cs[i];
        }

        feed_forward(L.ffn_norm, L.fc1, L.fc2, x, rows, d, ws);
    }
    if (m.memory)
        for (int r = 0; r < rows; ++r) io->gate[r] = gates[r] / m.n_layers;

    // the vocabulary: log-softmax, the banned tokens out, the n best
    layer_norm(m.final_norm, x, rows, d, h);
    const int V = m.vocab, N = io->n_best;
    float* logits = room(ws.logits, (size_t)rows * V);
    qlinear(m.output, h, rows, d, logits, V, s);
    std::vector<float> best_v(N);
    std::vector<int64_t> best_i(N);
    for (int r = 0; r < rows; ++r) {
        float* lr = logits + (size_t)r * V;
        const float top = max_of(lr, V);
        float total = 0.f;
#pragma omp simd reduction(+ : total)
        for (int j = 0; j < V; ++j) total += exp_neg(lr[j] - top);
        const float lse = top + std::log(total);
        const int64_t* banned = io->ban + (size_t)r * io->n_ban;
        bool eos_banned = false;
        for (int b = 0; b < io->n_ban; ++b) {
            if (banned[b] >= 0 && banned[b] < V) lr[banned[b]] = -INFINITY;
            eos_banned |= banned[b] == m.eos;
        }
        io->eos_lp[r] = eos_banned ? -INFINITY : lr[m.eos] - lse;
        // the N largest, best first (ties: the lower token first); a chunk of 16 whose
        // largest does not beat the N-th best so far is passed over whole
        int filled = 0;
        for (int j0 = 0; j0 < V; j0 += kKeys) {
            const int end = std::min(V, j0 + kKeys);
            if (filled == N && end - j0 == kKeys && !any_above(lr + j0, best_v[N - 1])) continue;
            for (int j = j0; j < end; ++j) {
                const float v = lr[j];
                if (filled == N && !(v > best_v[N - 1])) continue;
                int at = filled < N ? filled++ : N - 1;
                while (at > 0 && v > best_v[at - 1]) {
                    best_v[at] = best_v[at - 1];
                    best_i[at] = best_i[at - 1];
                    --at;
                }
                best_v[at] = v;
                best_i[at] = j;
            }
        }
        for (int k = 0; k < N; ++k) {
            io->best_lp[(size_t)r * N + k] = best_v[k] - lse;
            io->best_ids[(size_t)r * N + k] = best_i[k];
        }
    }
}

}  // namespace

namespace {

// The checks and the step of `ragmt_step`, for its callers here: each row's history made
// from its ancestor's, then the rows' step, split between threads when asked.
int run_step(const Model& m, StepIO* io, int sentences) {
    const int rows = io->rows;
    if (rows <= 0 || io->groups <= 0 || rows % io->groups) return 1;
    if (io->position < 0 || io->position >= m.max_positions) return 2;
    if (io->n_best < 1 || io->n_best > m.vocab) return 3;
    if (m.d_head % kKeys || m.d_head > kKeys * kMaxChunks) return 6;
    for (int r = 0; r < rows; ++r) {
        if (io->tokens[r] < 0 || io->tokens[r] >= m.vocab) return 4;
        if (io->past > 0 && (io->order[r] < 0 || io->order[r] >= io->past_rows)) return 5;
    }
    if (rows > io->slots || io->past >= io->capacity) return 7;
    for (int g = 0; g < io->groups; ++g) {
        const int s = io->sentence_of[g];
        if (s < 0 || s >= sentences) return 10;
        if (io->src_len[s] < 0 || io->src_len[s] > io->src) return 9;
        if (m.memory && (io->mem_len[s] < 0 || io->mem_len[s] > io->mem)) return 9;
    }
    for (int r = 0; r < rows; ++r) {  // each row's history: its ancestor's, then its own slot
        int32_t* to = io->new_history + (size_t)r * io->capacity;
        if (io->past > 0) {
            const int32_t* from = io->history + (size_t)io->order[r] * io->capacity;
            for (int p = 0; p < io->past; ++p) {
                if (from[p] < 0 || from[p] >= io->slots) return 8;
                to[p] = from[p];
            }
        }
        to[io->past] = r;
    }
    // Rows are independent (each quantized alone), so a wide step splits its sentences
    // between threads, each running the whole step for its own.
    in_parts(io->groups, io->threads, [&](int g0, int g1) { step_rows(m, *io, g0, g1); });
    return 0;
}

}  // namespace

extern "C" int ragmt_step(const Model* model, StepIO* io) {
    std::vector<int32_t> identity;
    StepIO call = *io;
    if (call.sentence_of == nullptr) {
        identity.resize(std::max(0, call.groups));
        for (int g = 0; g < call.groups; ++g) identity[g] = g;
        call.sentence_of = identity.data();
    }
    return run_step(*model, &call, call.groups);
}

// --------------------------------------------------------------------------- encoder

extern "C" {

// An encoder layer (pre-norm self-attention, then feed-forward) and the stack of them: what
// the source encoder's graph computes, without its final norm.
struct EncoderLayer {
    Norm self_norm, ffn_norm;
    QLinear qkv, self_out, fc1, fc2;
};

struct Encoder {
    int d, heads, d_head, n_layers;
    const EncoderLayer* layers;
};

// `x` (batch, len, d): the embedded sentences in, the last layer's output out (in place).
// Each sentence's tokens come first, its padding after (`lengths`); padding rows are
// computed too (attending to the sentence's tokens) and mean nothing.
struct EncodeIO {
    int batch, len, threads;
    float* x;
    const int32_t* lengths;  // (batch)
};

}  // extern "C"

namespace {

// The encoder for sentences b0..b1 of `io`.
void encode_sentences(const Encoder& e, const EncodeIO& io, int b0, int b1) {
    const int S = io.len, d = e.d, dh = e.d_head, H = e.heads, rows = (b1 - b0) * S;
    if (rows == 0) return;
    Lease lease;
    Workspace& ws = *lease.ws;
    Scratch& s = ws.scratch;
    const size_t rd = (size_t)rows * d;
    float* x = io.x + (size_t)b0 * S * d;
    float* y = room(ws.y, rd);
    float* qkv = room(ws.qkv, 3 * rd);
    float* ctx = room(ws.ctx, rd);
    for (int l = 0; l < e.n_layers; ++l) {
        const EncoderLayer& L = e.layers[l];
        float* h = room(ws.h, rd);
        layer_norm(L.self_norm, x, rows, d, h);
        qlinear(L.qkv, h, rows, d, qkv, 3 * d, s);
        for (int b = 0; b < b1 - b0; ++b) {
            const int n = io.lengths[b0 + b];
            const float* qb = qkv + (size_t)b * S * 3 * d;
            float* cb = ctx + (size_t)b * S * d;
            if (n == 0)
                std::fill_n(cb, (size_t)S * d, 0.f);
            else
                attend_block(qb, 3 * d, S, qb + d, 3 * d, n, d, H, dh, cb, ws);
        }
        qlinear(L.self_out, ctx, rows, d, y, d, s);
        for (size_t i = 0; i < rd; ++i) x[i] += y[i];
        feed_forward(L.ffn_norm, L.fc1, L.fc2, x, rows, d, ws);
    }
}

}  // namespace

extern "C" int ragmt_encode(const Encoder* encoder, const EncodeIO* io) {
    const Encoder& e = *encoder;
    if (io->batch <= 0 || io->len <= 0) return 14;
    if (e.d_head % kKeys || e.d_head > kKeys * kMaxChunks) return 6;
    for (int b = 0; b < io->batch; ++b)
        if (io->lengths[b] < 0 || io->lengths[b] > io->len) return 9;
    in_parts(io->batch, io->threads, [&](int b0, int b1) { encode_sentences(e, *io, b0, b1); });
    return 0;
}

// --------------------------------------------------------------------------- memory encoder

extern "C" {

// A memory encoder layer (models/semiparametric.py's `ConditionedEncoderLayer`): pre-norm
// self-attention, cross-attention to a context, feed-forward. Without a context (the "tm"
// memory) the cross-attention's fields are unused.
struct MemoryLayer {
    Norm self_norm, cross_norm, ffn_norm;
    QLinear qkv, self_out, cross_q, cross_kv, cross_out, fc1, fc2;
};

// `MemoryEncoder`: source layers (the "cstm" memory; n_source 0 otherwise) over each
// retrieved source with the query sentence as context, then target layers over each retrieved
// target with the retrieved source (after `source_norm`) as context, or the query sentence
// without source layers ("ctm"), or no context (`conditioned` 0, "tm"); then `norm`.
struct MemoryEncoder {
    int d, heads, d_head, vocab, max_positions, n_source, n_target, conditioned;
    float embed_scale;
    const float* embed;      // (vocab, d)
    const float* positions;  // (max_positions, d)
    const MemoryLayer* source_layers;
    Norm source_norm;
    const MemoryLayer* target_layers;
    Norm norm;
};

// Each sentence's retrieved pairs (`slots` of them, token ids right-padded) and its encoding
// `context` (sentences, len, d), its first `context_lens` rows real, in; out (sentences,
// width, d): each sentence's present targets (tgt_lens > 0) encoded, one after the other in
// slot order, zeros after; `width` at least the most target tokens of any sentence.
struct MemoryIO {
    int sentences, slots, src_width, tgt_width, len, width, threads;
    const int64_t* src;       // (sentences, slots, src_width)
    const int64_t* tgt;       // (sentences, slots, tgt_width)
    const int32_t* src_lens;  // (sentences, slots)
    const int32_t* tgt_lens;  // (sentences, slots)
    const float* context;
    const int32_t* context_lens;  // (sentences)
    float* out;
};

}  // extern "C"

namespace {

// A sentence's present slots: where each one's tokens start among its rows, and how many.
struct Runs {
    std::vector<int> start, count;
    int rows = 0;
    void add(int n) {
        start.push_back(rows);
        count.push_back(n);
        rows += n;
    }
};

// Rows of token ids `ids` (one run per slot, `width` apart) embedded as `_embed` does:
// embedding times its scale plus the position within the slot.
void embed_runs(const MemoryEncoder& e, const int64_t* ids, int width, const std::vector<int>& slot,
                const Runs& runs, float* x) {
    const int d = e.d;
    for (size_t p = 0; p < slot.size(); ++p)
        for (int j = 0; j < runs.count[p]; ++j) {
            const float* em = e.embed + (size_t)ids[(size_t)slot[p] * width + j] * d;
            const float* pos = e.positions + (size_t)j * d;
            float* xr = x + (size_t)(runs.start[p] + j) * d;
            for (int i = 0; i < d; ++i) xr[i] = em[i] * e.embed_scale + pos[i];
        }
}

// One memory layer in place on rows `x` (each run a slot attending to itself); the context of
// slot p: rows of `context` (keys/values projected here), the whole of it when `per_slot` is
// null, else slot p's run of `per_slot`. No context: `context` null.
void memory_layer(const MemoryEncoder& e, const MemoryLayer& L, float* x, const Runs& runs,
                  const float* context, int context_rows, const Runs* per_slot, Workspace& ws) {
    const int d = e.d, H = e.heads, dh = e.d_head, rows = runs.rows;
    const size_t rd = (size_t)rows * d;
    Scratch& s = ws.scratch;
    float* h = room(ws.h, rd);
    float* qkv = room(ws.qkv, 3 * rd);
    float* ctx = room(ws.ctx, rd);
    float* y = room(ws.y, rd);
    layer_norm(L.self_norm, x, rows, d, h);
    qlinear(L.qkv, h, rows, d, qkv, 3 * d, s);
    for (size_t p = 0; p < runs.start.size(); ++p) {
        const float* qp = qkv + (size_t)runs.start[p] * 3 * d;
        attend_block(qp, 3 * d, runs.count[p], qp + d, 3 * d, runs.count[p], d, H, dh,
                     ctx + (size_t)runs.start[p] * d, ws);
    }
    qlinear(L.self_out, ctx, rows, d, y, d, s);
    for (size_t i = 0; i < rd; ++i) x[i] += y[i];
    if (context != nullptr) {
        float* kv = room(ws.kv, (size_t)context_rows * 2 * d);
        qlinear(L.cross_kv, context, context_rows, d, kv, 2 * d, s);
        layer_norm(L.cross_norm, x, rows, d, h);
        float* q = room(ws.cm, rd);
        qlinear(L.cross_q, h, rows, d, q, d, s);
        for (size_t p = 0; p < runs.start.size(); ++p) {
            const int k0 = per_slot ? per_slot->start[p] : 0;
            const int nk = per_slot ? per_slot->count[p] : context_rows;
            attend_block(q + (size_t)runs.start[p] * d, d, runs.count[p], kv + (size_t)k0 * 2 * d,
                         2 * d, nk, d, H, dh, ctx + (size_t)runs.start[p] * d, ws);
        }
        qlinear(L.cross_out, ctx, rows, d, y, d, s);
        for (size_t i = 0; i < rd; ++i) x[i] += y[i];
    }
    feed_forward(L.ffn_norm, L.fc1, L.fc2, x, rows, d, ws);
}

// The memory encoder for sentences b0..b1 of `io`.
void encode_memories(const MemoryEncoder& e, const MemoryIO& io, int b0, int b1) {
    const int d = e.d, N = io.slots;
    Lease lease;
    Workspace& ws = *lease.ws;
    for (int b = b0; b < b1; ++b) {
        std::vector<int> slot;
        Runs sources, targets;
        for (int p = 0; p < N; ++p) {
            const int at = b * N + p;
            if (io.tgt_lens[at] == 0) continue;  // an absent slot
            slot.push_back(at);
            targets.add(io.tgt_lens[at]);
            sources.add(e.n_source ? io.src_lens[at] : 0);
        }
        float* out = io.out + (size_t)b * io.width * d;
        std::fill_n(out, (size_t)io.width * d, 0.f);
        if (targets.rows == 0) continue;
        const float* query = io.context + (size_t)b * io.len * d;
        const int query_rows = io.context_lens[b];
        const float* context = e.conditioned && query_rows > 0 ? query : nullptr;
        const Runs* per_slot = nullptr;
        int context_rows = query_rows;
        if (e.n_source) {
            float* xs = room(ws.xs, (size_t)sources.rows * d);
            embed_runs(e, io.src, io.src_width, slot, sources, xs);
            for (int l = 0; l < e.n_source; ++l)
                memory_layer(e, e.source_layers[l], xs, sources, query_rows > 0 ? query : nullptr,
                             query_rows, nullptr, ws);
            float* ns = room(ws.ns, (size_t)sources.rows * d);
            layer_norm(e.source_norm, xs, sources.rows, d, ns);
            context = ns;  // each target attends to its own retrieved source
            context_rows = sources.rows;
            per_slot = &sources;
        }
        float* xt = room(ws.x, (size_t)targets.rows * d);
        embed_runs(e, io.tgt, io.tgt_width, slot, targets, xt);
        for (int l = 0; l < e.n_target; ++l)
            memory_layer(e, e.target_layers[l], xt, targets, e.conditioned ? context : nullptr,
                         context_rows, per_slot, ws);
        layer_norm(e.norm, xt, targets.rows, d, out);
    }
}

}  // namespace

// The memory encoder (`MemoryEncoder`) on each sentence's retrieved pairs, their real tokens
// only, with the step's int8 products: the padding that a batch lays its neighbours out in
// was about half of ONNX Runtime's work, and its graph's operators most of the rest at batch 1.
extern "C" int ragmt_encode_memory(const MemoryEncoder* encoder, const MemoryIO* io) {
    const MemoryEncoder& e = *encoder;
    if (io->sentences <= 0) return 14;
    if (e.d_head % kKeys || e.d_head > kKeys * kMaxChunks) return 6;
    for (int b = 0; b < io->sentences; ++b) {
        if (io->context_lens[b] < 0 || io->context_lens[b] > io->len) return 9;
        int total = 0;
        for (int p = 0; p < io->slots; ++p) {
            const int at = b * io->slots + p, nt = io->tgt_lens[at], ns = io->src_lens[at];
            if (nt < 0 || nt > io->tgt_width || ns < 0 || ns > io->src_width) return 9;
            if (nt > 0 && e.n_source && ns == 0) return 16;
            if (std::max(nt, e.n_source ? ns : 0) > e.max_positions) return 2;
            for (int j = 0; j < nt; ++j)
                if (io->tgt[(size_t)at * io->tgt_width + j] < 0 ||
                    io->tgt[(size_t)at * io->tgt_width + j] >= e.vocab)
                    return 4;
            for (int j = 0; nt > 0 && e.n_source && j < ns; ++j)
                if (io->src[(size_t)at * io->src_width + j] < 0 ||
                    io->src[(size_t)at * io->src_width + j] >= e.vocab)
                    return 4;
            total += nt;
        }
        if (total > io->width) return 7;
    }
    in_parts(io->sentences, io->threads,
             [&](int b0, int b1) { encode_memories(e, *io, b0, b1); });
    return 0;
}

// --------------------------------------------------------------------------- keys and values

extern "C" {

// Every decoder layer's keys and values of one attention (the source's or the memory's).
struct KeysValues {
    int d, heads, d_head, n_layers;
    const QLinear* kv;  // (n_layers): the keys' then the values' projection, n = 2 d
};

// States `x` (groups, len, d), each sentence's `lens` first rows real and the rest padding,
// to the step's halves: keys transposed `kt` (groups, layers, heads, d_head, ldk), zero past a
// sentence's keys, and values `v` (groups, layers, heads, len, d_head), zero past them.
struct ProjectIO {
    int groups, len, ldk, threads;
    const float* x;
    const int32_t* lens;
    uint16_t* kt;
    uint16_t* v;
};

}  // extern "C"

namespace {

constexpr float kHalfMax = 65504.f;

// Float to IEEE half, to nearest even, where the CPU has no instruction for it (|f| <= the
// largest half: the caller has checked).
inline uint16_t float_to_half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000;
    x &= 0x7fffffff;
    if (x >= 0x47800000) return sign | 0x7c00;  // beyond the halves: infinity
    if (x < 0x38800000) {                        // a half subnormal (or zero): f / 2^-24
        if (x < 0x33000000) return sign;
        const uint32_t e = x >> 23, m = (x & 0x7fffff) | 0x800000;
        const int shift = 126 - (int)e;
        uint32_t r = m >> shift;
        const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (r & 1))) ++r;
        return sign | r;
    }
    uint32_t r = x - 0x38000000;  // the exponent rebiased from 127 to 15
    const uint32_t lower = r & 0x1fff;
    r >>= 13;
    if (lower > 0x1000 || (lower == 0x1000 && (r & 1))) ++r;
    return sign | r;
}

// n floats (a multiple of 16) to halves.
inline void store_halves(const float* x, int n, uint16_t* out) {
    for (int i = 0; i < n; i += 16) {
#if defined(__AVX512F__)
        const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256((__m256i*)(out + i), h);
#elif defined(__F16C__)
        for (int k = 0; k < 16; k += 8) {
            const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i + k), _MM_FROUND_TO_NEAREST_INT);
            _mm_storeu_si128((__m128i*)(out + i + k), h);
        }
#else
        for (int k = 0; k < 16; ++k) out[i + k] = float_to_half(x[i + k]);
#endif
    }
}

// `ragmt_keys_values` for sentences g0..g1; false when a key or value is beyond the halves.
bool project_sentences(const KeysValues& kv, const ProjectIO& io, int g0, int g1) {
    const int d = kv.d, dh = kv.d_head, H = kv.heads, L = kv.n_layers, S = io.len;
    int rows = 0;
    for (int g = g0; g < g1; ++g) rows += io.lens[g];
    Lease lease;
    Workspace& ws = *lease.ws;
    // the sentences' real rows side by side, then each layer's keys and values of them all
    float* x = room(ws.x, (size_t)std::max(rows, 1) * d);
    float* y = room(ws.qkv, (size_t)std::max(rows, 1) * 2 * d);
    float* t = room(ws.w, (size_t)dh * io.ldk);  // one head's keys, transposed, as floats
    for (int g = g0, r = 0; g < g1; r += io.lens[g], ++g)
        std::memcpy(x + (size_t)r * d, io.x + (size_t)g * S * d, sizeof(float) * io.lens[g] * d);
    for (int l = 0; l < L; ++l) {
        if (rows > 0) qlinear(kv.kv[l], x, rows, d, y, 2 * d, ws.scratch);
        float lo = 0.f, hi = 0.f;
        range_of(y, rows * 2 * d, lo, hi);
        if (std::max(-lo, hi) > kHalfMax) return false;
        for (int g = g0, r = 0; g < g1; r += io.lens[g], ++g) {
            const int n = io.lens[g];
            for (int h = 0; h < H; ++h) {
                const size_t head = ((size_t)g * L + l) * H + h;
                std::fill_n(t, (size_t)dh * io.ldk, 0.f);
                for (int j = 0; j < n; ++j) {
                    const float* k = y + (size_t)(r + j) * 2 * d + h * dh;
                    for (int i = 0; i < dh; ++i) t[(size_t)i * io.ldk + j] = k[i];
                }
                store_halves(t, dh * io.ldk, io.kt + head * dh * io.ldk);
                uint16_t* vo = io.v + head * S * dh;
                for (int j = 0; j < n; ++j)
                    store_halves(y + (size_t)(r + j) * 2 * d + d + h * dh, dh, vo + (size_t)j * dh);
                std::fill(vo + (size_t)n * dh, vo + (size_t)S * dh, (uint16_t)0);
            }
        }
    }
    return true;
}

}  // namespace

// The step's keys and values of states `io->x` (`ProjectIO`), which the decoding step then
// reads: made here from the states' real rows only, straight into halves.
extern "C" int ragmt_keys_values(const KeysValues* kv, const ProjectIO* io) {
    if (io->groups <= 0 || io->len <= 0) return 14;
    if (kv->d_head % kKeys || io->ldk < io->len || io->ldk % kKeys) return 6;
    for (int g = 0; g < io->groups; ++g)
        if (io->lens[g] < 0 || io->lens[g] > io->len) return 9;
    std::atomic<bool> fits{true};
    in_parts(io->groups, io->threads, [&](int g0, int g1) {
        if (!project_sentences(*kv, *io, g0, g1)) fits = false;
    });
    return fits ? 0 : 15;
}

// --------------------------------------------------------------------------- beam search

extern "C" {

// The repeat ban of models/decoding.py (`Repeats`, `RepeatBan`): which tokens would close a
// back-to-back repeat of a word or of a span of 2..max_n pieces.
struct RepeatTables {
    int max_n, member_width;
    const int64_t* canon;    // (vocab) each id's case-folded twin
    const uint8_t* words;    // (vocab) whole-word pieces
    const uint8_t* gaps;     // (vocab) pieces that may separate a span from its repeat
    const uint8_t* stops;    // (vocab) pieces that end a sentence
    const uint8_t* wordy;    // (vocab) pieces that hold a word
    const int64_t* members;  // (vocab, member_width) the ids of each twin, padded with -1
    const uint8_t* free;     // (sentences, 2) may repeat a token, a span
};

// Beam search over the step, as models/decoding.py's `beam_search` (the same candidates, ties
// and order, so the same hypotheses), for the sentences of a `StepIO`'s per-sentence fields.
struct BeamIO {
    int beams, n_best, threads, parallel_rows, pad, bos;
    double length_penalty;
    const int32_t* limits;        // (sentences) the most tokens before EOS is forced
    const RepeatTables* repeats;  // null: repeats allowed
    int out_width;
    int64_t* out_tokens;   // (sentences, out_width) each best hypothesis, pad after it
    int32_t* out_lengths;  // (sentences)
    double* out_gates;     // (sentences) its mean gate; NaN without a memory
};

}  // extern "C"

namespace {

// The tokens a row with history h (t tokens) may not emit next (`RepeatBan.banned`).
void repeat_bans(const RepeatTables& T, const int64_t* h, int t, const uint8_t* free,
                 std::vector<int64_t>& twins, std::vector<int64_t>& out) {
    out.clear();
    twins.clear();
    if (t == 0) return;
    auto c = [&](int i) { return T.canon[h[i]]; };
    if (!free[0]) {
        if (T.words[h[t - 1]]) twins.push_back(c(t - 1));
        // a whole word again after a sentence's end: its twin after the stop
        if (t >= 2 && T.stops[h[t - 1]] && T.words[h[t - 2]]) twins.push_back(c(t - 2));
    }
    if (!free[1]) {
        for (int gap = 0; gap < 2; ++gap) {  // right after the span, or after one piece
            const int top = std::min(T.max_n, (t + 1 - gap) / 2);
            for (int n = 2; n <= top; ++n) {
                // the last n-1 tokens equal the n-1 that start n + gap back: that start
                // token would close a repeat of n
                bool same = true;
                for (int b = 0; b < n - 1 && same; ++b) same = c(t - 1 - b) == c(t - 1 - b - n - gap);
                if (!same || (gap && !T.gaps[h[t - n]])) continue;
                bool words = false;  // only a span that says a word is a loop
                for (int i = t - 2 * n - gap + 1; i <= t - n - gap && !words; ++i)
                    words = T.wordy[h[i]] != 0;
                if (words) twins.push_back(c(t - n - gap));
            }
        }
    }
    for (int64_t twin : twins)
        for (int j = 0; j < T.member_width; ++j) {
            const int64_t id = T.members[(size_t)twin * T.member_width + j];
            if (id >= 0) out.push_back(id);
        }
}

struct Finished {
    double score;
    std::vector<int64_t> tokens;
    double gate;
};

}  // namespace

extern "C" int ragmt_beam_search(const Model* model, const StepIO* sentences, BeamIO* b) {
    const Model& m = *model;
    const int G = sentences->groups, K = b->beams, N = b->n_best;
    if (G <= 0 || K <= 0) return 1;
    if (N < 1 || N > m.vocab) return 3;
    int longest = 0;
    for (int s = 0; s < G; ++s) {
        if (b->limits[s] < 0) return 11;
        longest = std::max(longest, (int)b->limits[s]);
    }
    if (longest >= m.max_positions) return 2;
    if (longest > b->out_width) return 12;
    const RepeatTables* rep = b->repeats;
    if (rep) {
        for (int v = 0; v < m.vocab; ++v)
            if (rep->canon[v] < 0 || rep->canon[v] >= m.vocab) return 13;
        for (size_t i = 0; i < (size_t)m.vocab * rep->member_width; ++i)
            if (rep->members[i] < -1 || rep->members[i] >= m.vocab) return 13;
    }
    const int rows0 = G * K, capacity = longest + 1;
    const size_t kv_row = (size_t)m.n_layers * 2 * m.heads * m.d_head;
    // Positions first, and left uninitialized: only the positions a batch reaches are ever
    // touched, and a store for its longest limit is tens of megabytes at batch 32.
    std::unique_ptr<float[]> store(new float[(size_t)capacity * rows0 * kv_row]);
    std::vector<int32_t> history((size_t)rows0 * capacity), new_history(history.size());
    std::vector<int64_t> hist((size_t)rows0 * capacity), new_hist(hist.size());  // tokens
    std::vector<int64_t> tokens(rows0, b->bos), order(rows0), next_tokens(rows0);
    std::vector<int64_t> next_order(rows0);
    std::vector<int32_t> alive(G);
    for (int s = 0; s < G; ++s) alive[s] = s;
    const float minus_inf = -INFINITY;
    std::vector<float> scores(rows0, minus_inf), next_scores(rows0);
    for (int a = 0; a < G; ++a) scores[(size_t)a * K] = 0.f;  // beam 0 alone is live at first
    std::vector<float> gate_sum(rows0, 0.f), next_gate_sum(rows0), gate(rows0, 1.f);
    std::vector<float> best_lp((size_t)rows0 * N), eos_lp(rows0);
    std::vector<int64_t> best_ids((size_t)rows0 * N);
    std::vector<std::vector<Finished>> finished(G);
    std::vector<std::vector<int64_t>> bans(rows0);
    std::vector<int64_t> twins, ban_table;
    const int M = std::min(2 * K, K * N);
    std::vector<float> cand((size_t)K * N);
    std::vector<int> idx((size_t)K * N), pick;
    int past_rows = 0;
    for (int step = 0;; ++step) {
        const int A = (int)alive.size(), R = A * K;
        // the banned tokens: pad and BOS never, and what would close a repeat
        size_t widest = 0;
        for (int r = 0; r < R; ++r) {
            bans[r].clear();
            if (rep)
                repeat_bans(*rep, &hist[(size_t)r * capacity], step, rep->free + 2 * alive[r / K],
                            twins, bans[r]);
            widest = std::max(widest, bans[r].size());
        }
        const int n_ban = 2 + (int)widest;
        ban_table.assign((size_t)R * n_ban, b->pad);
        for (int r = 0; r < R; ++r) {
            int64_t* row = &ban_table[(size_t)r * n_ban];
            row[0] = b->pad;
            row[1] = b->bos;
            std::copy(bans[r].begin(), bans[r].end(), row + 2);
        }
        StepIO io = *sentences;
        io.rows = R;
        io.groups = A;
        io.past_rows = past_rows;
        io.past = step;
        io.n_best = N;
        io.n_ban = n_ban;
        io.threads = R >= b->parallel_rows ? b->threads : 1;
        io.position = step;
        io.tokens = tokens.data();
        io.order = order.data();
        io.ban = ban_table.data();
        io.slots = rows0;
        io.capacity = capacity;
        io.store = store.get();
        io.history = history.data();
        io.new_history = new_history.data();
        io.best_lp = best_lp.data();
        io.best_ids = best_ids.data();
        io.eos_lp = eos_lp.data();
        io.gate = gate.data();
        io.sentence_of = alive.data();
        const int status = run_step(m, &io, G);
        if (status) return status;
        std::swap(history, new_history);
        for (int r = 0; r < R; ++r) {
            if (b->limits[alive[r / K]] == step) {  // at its length limit: EOS alone
                float* lp = &best_lp[(size_t)r * N];
                int64_t* ids = &best_ids[(size_t)r * N];
                std::fill(lp, lp + N, minus_inf);
                std::fill(ids, ids + N, (int64_t)b->pad);
                lp[0] = eos_lp[r];
                ids[0] = m.eos;
            }
            if (m.memory) gate_sum[r] += gate[r];
        }
        // each sentence's K best continuations, and the hypotheses that end among them
        std::vector<int> keep;
        for (int a = 0; a < A; ++a) {
            const int sentence = alive[a];
            for (int j = 0; j < K; ++j)
                for (int i = 0; i < N; ++i)
                    cand[(size_t)j * N + i] = scores[(size_t)a * K + j] + best_lp[((size_t)a * K + j) * N + i];
            for (int i = 0; i < K * N; ++i) idx[i] = i;
            std::partial_sort(idx.begin(), idx.begin() + M, idx.end(), [&](int x, int y) {
                return cand[x] > cand[y] || (cand[x] == cand[y] && x < y);
            });
            auto token_of = [&](int c) { return best_ids[((size_t)a * K + c / N) * N + c % N]; };
            for (int j = 0; j < K; ++j) {
                const int c = idx[j];
                if (token_of(c) != m.eos || !std::isfinite(cand[c])) continue;
                const int row = a * K + c / N;
                const double norm = std::pow((5.0 + step + 1) / 6.0, b->length_penalty);
                Finished done;
                done.score = (double)cand[c] / norm;
                done.tokens.assign(&hist[(size_t)row * capacity], &hist[(size_t)row * capacity] + step);
                const bool memory = m.memory && sentences->has_memory[sentence] != 0.f;
                done.gate = memory ? (double)gate_sum[row] / (step + 1) : NAN;
                finished[sentence].push_back(std::move(done));
            }
            // the K best that do not end continue; EOS sorts last and is dead if picked
            pick.clear();
            for (int j = 0; j < M && (int)pick.size() < K; ++j)
                if (token_of(idx[j]) != m.eos) pick.push_back(idx[j]);
            for (int j = 0; j < M && (int)pick.size() < K; ++j)
                if (token_of(idx[j]) == m.eos) pick.push_back(idx[j]);
            bool live = false;
            for (int k = 0; k < K; ++k) {
                const int c = pick[k], to = a * K + k, from = a * K + c / N;
                const bool eos = token_of(c) == m.eos;
                next_scores[to] = eos ? minus_inf : cand[c];
                live |= !eos && std::isfinite(cand[c]);
                next_tokens[to] = token_of(c);
                next_order[to] = from;
                next_gate_sum[to] = gate_sum[from];
                std::copy(&hist[(size_t)from * capacity], &hist[(size_t)from * capacity] + step,
                          &new_hist[(size_t)to * capacity]);
                new_hist[(size_t)to * capacity + step] = next_tokens[to];
            }
            if ((int)finished[sentence].size() < K && step < b->limits[sentence] && live)
                keep.push_back(a);
        }
        if (keep.empty()) break;  // every sentence is done
        // the sentences kept, their rows first: the next step continues them
        for (int i = 0; i < (int)keep.size(); ++i) {
            alive[i] = alive[keep[i]];
            for (int k = 0; k < K; ++k) {
                const int to = i * K + k, from = keep[i] * K + k;
                scores[to] = next_scores[from];
                tokens[to] = next_tokens[from];
                order[to] = next_order[from];
                gate_sum[to] = next_gate_sum[from];
                std::copy(&new_hist[(size_t)from * capacity],
                          &new_hist[(size_t)from * capacity] + step + 1,
                          &hist[(size_t)to * capacity]);
            }
        }
        alive.resize(keep.size());
        past_rows = R;
    }
    for (int s = 0; s < G; ++s) {
        const Finished* best = nullptr;  // the first of equal scores: the one that ended first
        for (const Finished& f : finished[s])
            if (best == nullptr || f.score > best->score) best = &f;
        int64_t* out = b->out_tokens + (size_t)s * b->out_width;
        std::fill(out, out + b->out_width, (int64_t)b->pad);
        b->out_lengths[s] = best ? (int32_t)best->tokens.size() : 0;
        b->out_gates[s] = best ? best->gate : NAN;
        if (best) std::copy(best->tokens.begin(), best->tokens.end(), out);
    }
    return 0;
}

// The tokens a history `h` (t tokens) of sentence `sentence` may not emit next, for tests:
// how many, the first `room` of them in `out`.
extern "C" int ragmt_repeat_bans(const RepeatTables* tables, const int64_t* h, int t,
                                 int sentence, int64_t* out, int room) {
    std::vector<int64_t> twins, found;
    repeat_bans(*tables, h, t, tables->free + 2 * sentence, twins, found);
    std::copy_n(found.begin(), std::min<size_t>(found.size(), std::max(room, 0)), out);
    return (int)found.size();
}

// One int8 linear layer alone, for tests: y (rows, n) = x (rows, k) W^T + b.
extern "C" void ragmt_qlinear(const QLinear* layer, const float* x, int rows, float* y) {
    Scratch s;
    qlinear(*layer, x, rows, layer->k, y, layer->n, s);
}
