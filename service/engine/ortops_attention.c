/* A decoder step's two attentions, each one onnxruntime operator (domain "attention_mt").

   The step graph (export/step_graph.py) spells each attention of a layer in 9 (cross) or 17 (self)
   standard nodes, plus 10 for the masks: head reshapes, transposes, two MatMuls, the scale's Div, the
   mask's Where, Softmax, and the self-attention's own-slot bookkeeping. Fused, the shipped int8 step
   goes from 192 nodes to 110. At one row each is a dispatch and a small pass;
   service/engine/attention_fusion.py rewrites them into these as a graph loads.

   CacheAttention(q, k, v, past_key, past_value, positions, scale) -> (mixed, weights)
     q, k, v: (B, H) this step's projections; past_key, past_value: (B, N, P, D), N * D = H;
     positions: (B,) int64; scale: float32 scalar. Row b attends to the cache's slots before
     positions[b] and to its own k and v at slot positions[b] (when it is inside P); later slots get
     weight 0 and are never read.
     mixed: (B, H), the heads' sums side by side; weights: (B, 1, N, P).
   CrossAttention(q, key, value, blocked, scale[, sources]) -> (mixed, weights)
     q: (B, H); key, value: (B', N, S, D); blocked: (B, S) bool, true for padding; sources: (B,)
     int64, the row of key and value that row b reads (without it, row b's own, and B' = B). A beam
     search's rows of one sentence read one copy of its keys and values, which are then neither
     copied out to every beam nor read from memory once per beam.
     mixed: (B, H); weights: (B, 1, N, S). A row with every position blocked gets zeros.

   Scores are q.k / scale, weights their softmax. The values are the graph's to rounding, not bit for
   bit (onnxruntime's MatMul and exp sum in other orders). What they keep exactly is batch invariance:
   each row is computed alone, every sum runs in a fixed order that does not depend on B, P or S, and
   a blocked slot adds nothing, so a row gets the same bits alone, padded, beside any others, or on
   another thread (from 8 rows on, each row is a task for the session's intra-op threads). The
   sums run in eight lanes (GCC's and clang's vector extension), each lane's operations IEEE's, with
   no fused multiply-add (the extension is built with -ffp-contract=off): every CPU gets the same. */

#include <math.h>
#include <string.h>

#include "ortops.h"

#if defined(__GNUC__) && !defined(__clang__)
/* the eight-lane helpers are always inlined: no vector crosses a call, whatever the ABI says of one */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

enum { LANES = 8 };

/* The row loops are built twice, for AVX2 and for any CPU, and attention_kernels picks one as a
   session registers the operators. The AVX2 build does the same eight-lane arithmetic in one register
   where the other takes two, so both give the same bits (the tests compare them). Every helper is
   inlined into both. */
#define INLINE static inline __attribute__((always_inline))
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_BUILD 1
#else
#define HAVE_AVX2_BUILD 0
#endif

/* Eight lanes as one value (GCC's and clang's vector extension): each lane's arithmetic is the
   scalar IEEE operation, so a lane sums what the scalar loop would, on any CPU; AVX2 takes it in one
   register, SSE in two. Loads and stores go through memcpy: the tensors need not be aligned. */
typedef float v8 __attribute__((vector_size(LANES * sizeof(float))));

INLINE v8 load8(const float *p) {
    v8 x;
    memcpy(&x, p, sizeof x);
    return x;
}

INLINE void store8(float *p, v8 x) { memcpy(p, &x, sizeof x); }

typedef float v4 __attribute__((vector_size(4 * sizeof(float))));

INLINE float reduced(v8 acc) {
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* The partial sums of a . b over d: lane l sums a[i] * b[i] for i = l mod 8, in i's order. */
INLINE v8 lanes_dot(const float *a, const float *b, int64_t d) {
    v8 acc = {0};
    int64_t i = 0;
    for (; i + LANES <= d; i += LANES) acc += load8(a + i) * load8(b + i);
    for (int l = 0; i < d; i++, l++) acc[l] += a[i] * b[i];
    return acc;
}

/* out[j] = (a . rows[j]) / scale for j < n, rows d apart: four rows at a time (four independent
   chains hide the adds' latency), each summed as lanes_dot sums */
INLINE void scores(const float *a, const float *rows, int64_t n, int64_t d, float scale, float *out) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *r = rows + j * d;
        v8 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
        int64_t i = 0;
        for (; i + LANES <= d; i += LANES) {
            const v8 x = load8(a + i);
            c0 += x * load8(r + i);
            c1 += x * load8(r + d + i);
            c2 += x * load8(r + 2 * d + i);
            c3 += x * load8(r + 3 * d + i);
        }
        for (int l = 0; i < d; i++, l++) {
            c0[l] += a[i] * r[i];
            c1[l] += a[i] * r[d + i];
            c2[l] += a[i] * r[2 * d + i];
            c3[l] += a[i] * r[3 * d + i];
        }
        out[j] = reduced(c0) / scale;
        out[j + 1] = reduced(c1) / scale;
        out[j + 2] = reduced(c2) / scale;
        out[j + 3] = reduced(c3) / scale;
    }
    for (; j < n; j++) out[j] = reduced(lanes_dot(a, rows + j * d, d)) / scale;
}

typedef int32_t v8i __attribute__((vector_size(LANES * sizeof(int32_t))));

/* e^x in eight lanes, for x <= 0: Cephes' expf, 2^n times a degree-7 polynomial (~1 ulp); 0 below
   -87 and for a NaN. */
INLINE v8 exp8(v8 x) {
    const v8 low = (v8){0} - 87.0f;
    const v8i keep = x >= low; /* all ones where x >= low; a NaN compares false */
    const v8 xc = (v8)(((v8i)x & keep) | ((v8i)low & ~keep));
    const v8 n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    v8 r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v8 p = r * 1.9875691500e-4f;
    p = p + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const v8 y = (p * (r * r) + r) + 1.0f;
    const v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
    return (v8)((v8i)(y * (v8)bits) & keep);
}

/* w[0..n) = e^w[0..n), eight at a time (the last few through a buffer): the same bits for a value
   wherever it sits */
INLINE void exps(float *w, int64_t n) {
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES) store8(w + j, exp8(load8(w + j)));
    if (j < n) {
        float tail[LANES] = {0};
        memcpy(tail, w + j, (size_t)(n - j) * sizeof *w);
        store8(tail, exp8(load8(tail)));
        memcpy(w + j, tail, (size_t)(n - j) * sizeof *w);
    }
}

/* w[0..n) = softmax of the scores in w, blocked ones (blocked[j] != 0; blocked may be NULL) 0. A
   blocked score may be anything (a padded key's), and is never used. */
INLINE void softmax(float *w, int64_t n, const uint8_t *blocked) {
    float top = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        if (!(blocked && blocked[j]) && w[j] > top) top = w[j];
    if (top == -INFINITY) { /* nothing to attend to */
        memset(w, 0, (size_t)n * sizeof *w);
        return;
    }
    if (blocked)
        for (int64_t j = 0; j < n; j++) w[j] = blocked[j] ? top : w[j];
    for (int64_t j = 0; j < n; j++) w[j] = w[j] - top;
    exps(w, n);
    if (blocked)
        for (int64_t j = 0; j < n; j++) w[j] = blocked[j] ? 0.0f : w[j];
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) sum += w[j];
    for (int64_t j = 0; j < n; j++) w[j] = w[j] / sum;
}

/* out[0..d) += w * v[0..d) */
INLINE void add_scaled(float *out, float w, const float *v, int64_t d) {
    for (int64_t i = 0; i < d; i++) out[i] += w * v[i];
}

INLINE v4 load4(const float *p) {
    v4 x;
    memcpy(&x, p, sizeof x);
    return x;
}

/* out[0..d) = sum over j of w[j] * values[j, 0..d), in j's order, skipping zero weights: 32 columns
   at a time, held in registers across the rows. Columns are independent, so any vector width gives
   the same bits: eight-wide (`wide`, for AVX2) or four-wide (what every SIMD unit has; eight-wide
   vectors split in two, a compiler keeps them on the stack). */
INLINE void mix(float *out, const float *w, const float *values, int64_t n, int64_t d, int wide) {
    int64_t c = 0;
    for (; c + 32 <= d; c += 32) {
        if (wide) {
            v8 a[4] = {{0}};
            for (int64_t j = 0; j < n; j++)
                if (w[j] != 0.0f)
                    for (int k = 0; k < 4; k++) a[k] += w[j] * load8(values + j * d + c + LANES * k);
            memcpy(out + c, a, sizeof a);
        } else {
            v4 a[8] = {{0}};
            for (int64_t j = 0; j < n; j++)
                if (w[j] != 0.0f)
                    for (int k = 0; k < 8; k++) a[k] += w[j] * load4(values + j * d + c + 4 * k);
            memcpy(out + c, a, sizeof a);
        }
    }
    if (c < d) {
        memset(out + c, 0, (size_t)(d - c) * sizeof *out);
        for (int64_t j = 0; j < n; j++)
            if (w[j] != 0.0f) add_scaled(out + c, w[j], values + j * d + c, d - c);
    }
}

typedef struct {
    Tensor q, k, v, keys, values, positions, scale;
} CacheInputs;

static OrtStatus *cache_inputs(OrtKernelContext *context, CacheInputs *in) {
    OrtStatus *status = ops_input(context, 0, TYPE_FLOAT, &in->q);
    if (!status) status = ops_input(context, 1, TYPE_FLOAT, &in->k);
    if (!status) status = ops_input(context, 2, TYPE_FLOAT, &in->v);
    if (!status) status = ops_input(context, 3, TYPE_FLOAT, &in->keys);
    if (!status) status = ops_input(context, 4, TYPE_FLOAT, &in->values);
    if (!status) status = ops_input(context, 5, TYPE_INT64, &in->positions);
    if (!status) status = ops_input(context, 6, TYPE_FLOAT, &in->scale);
    if (status) return status;
    const Tensor *q = &in->q, *c = &in->keys;
    int same = q->rank == 2 && in->k.rank == 2 && in->v.rank == 2 && c->rank == 4 && in->values.rank == 4;
    for (size_t i = 0; same && i < 2; i++) same = in->k.dims[i] == q->dims[i] && in->v.dims[i] == q->dims[i];
    for (size_t i = 0; same && i < 4; i++) same = in->values.dims[i] == c->dims[i];
    if (!same || c->dims[0] != q->dims[0] || c->dims[1] * c->dims[3] != q->dims[1] ||
        ops_count(in->positions.dims, in->positions.rank) != q->dims[0] || !ops_is_scalar(&in->scale))
        return ops_error("attention_mt.CacheAttention: q, k, v (B, H); past_key, past_value (B, N, P, D) with "
                         "N * D = H; positions (B,); a scalar scale");
    return NULL;
}

typedef struct {
    int64_t B, N, X, D; /* rows, heads, slots or source positions, head width */
} Heads;

/* what one row's task reads and writes: a row writes only its own mixed and weights */
typedef struct {
    Heads shape;
    const float *q, *k, *v, *keys, *values;
    const int64_t *positions;
    float scale;
    float *mixed, *weights;
} CacheTask;

typedef struct {
    Heads shape;
    const float *q, *keys, *values;
    const uint8_t *blocked;
    const int64_t *sources;
    float scale;
    float *mixed, *weights;
} CrossTask;

/* One row's heads: row b attends to the cache's slots before positions[b] and to its own k and v */
INLINE void cache_row(const CacheTask *t, int64_t b, int wide) {
    const Heads *c = &t->shape;
    const int64_t N = c->N, P = c->X, D = c->D, H = N * D, position = t->positions[b];
    const int64_t past = position < P ? position : P, seen = position < P ? past + 1 : P;
    for (int64_t h = 0; h < N; h++) {
        const int64_t row = b * H + h * D, head = (b * N + h) * P;
        float *w = t->weights + head;
        scores(t->q + row, t->keys + head * D, past, D, t->scale, w);
        if (seen > past) w[past] = reduced(lanes_dot(t->q + row, t->k + row, D)) / t->scale;
        softmax(w, seen, NULL);
        memset(w + seen, 0, (size_t)(P - seen) * sizeof *w);
        /* the cache's slots first, this step's own last: the graph's order */
        mix(t->mixed + row, w, t->values + head * D, past, D, wide);
        if (seen > past && w[past] != 0.0f) add_scaled(t->mixed + row, w[past], t->v + row, D);
    }
}

/* One row's heads: row b attends to the source row sources[b] (b without sources) */
INLINE void cross_row(const CrossTask *t, int64_t b, int wide) {
    const Heads *c = &t->shape;
    const int64_t N = c->N, S = c->X, D = c->D, H = N * D, source = t->sources ? t->sources[b] : b;
    for (int64_t h = 0; h < N; h++) {
        const int64_t row = b * H + h * D, head = (b * N + h) * S, kv = (source * N + h) * S * D;
        float *w = t->weights + head;
        scores(t->q + row, t->keys + kv, S, D, t->scale, w); /* blocked ones too: softmax drops them */
        softmax(w, S, t->blocked + b * S);
        mix(t->mixed + row, w, t->values + kv, S, D, wide);
    }
}

static void cache_row_portable(void *t, size_t b) { cache_row(t, (int64_t)b, 0); }
static void cross_row_portable(void *t, size_t b) { cross_row(t, (int64_t)b, 0); }
#if HAVE_AVX2_BUILD
__attribute__((target("avx2"))) static void cache_row_avx2(void *t, size_t b) { cache_row(t, (int64_t)b, 1); }
__attribute__((target("avx2"))) static void cross_row_avx2(void *t, size_t b) { cross_row(t, (int64_t)b, 1); }
#endif

static void (*cache_row_chosen)(void *, size_t) = cache_row_portable;
static void (*cross_row_chosen)(void *, size_t) = cross_row_portable;

/* From this many rows on, each row is a task of its own for the intra-op threads: a row is several
   microseconds (every head over every position), a hand-off about one */
enum { PARALLEL_ROWS = 8 };

static size_t row_tasks(int64_t rows) { return rows >= PARALLEL_ROWS ? (size_t)rows : 1; }

HIDDEN void attention_kernels(int avx2) {
#if HAVE_AVX2_BUILD
    cache_row_chosen = avx2 ? cache_row_avx2 : cache_row_portable;
    cross_row_chosen = avx2 ? cross_row_avx2 : cross_row_portable;
#else
    (void)avx2;
#endif
}

HIDDEN OrtStatus *cache_attention(OrtKernelContext *context) {
    CacheInputs in;
    OrtStatus *status = cache_inputs(context, &in);
    if (status) return status;
    const Heads shape = {in.keys.dims[0], in.keys.dims[1], in.keys.dims[2], in.keys.dims[3]};
    const int64_t mixed_dims[2] = {shape.B, shape.N * shape.D}, weight_dims[4] = {shape.B, 1, shape.N, shape.X};
    const int64_t *positions = in.positions.data;
    for (int64_t b = 0; b < shape.B; b++)
        if (positions[b] < 0) return ops_error("attention_mt.CacheAttention: a negative position");
    float *mixed, *weights;
    if ((status = ops_output(context, 0, mixed_dims, 2, (void **)&mixed))) return status;
    if ((status = ops_output(context, 1, weight_dims, 4, (void **)&weights))) return status;
    const CacheTask task = {shape, in.q.data, in.k.data, in.v.data, in.keys.data, in.values.data, positions,
                            *(const float *)in.scale.data, mixed, weights};
    ops_parallel(context, cache_row_chosen, (size_t)shape.B, row_tasks(shape.B), (void *)&task);
    return NULL;
}

HIDDEN OrtStatus *cross_attention(OrtKernelContext *context) {
    Tensor q, keys, values, blocked, scale_, sources = {0};
    size_t inputs = 0;
    OrtStatus *status = ops_input_count(context, &inputs);
    if (!status) status = ops_input(context, 0, TYPE_FLOAT, &q);
    if (!status) status = ops_input(context, 1, TYPE_FLOAT, &keys);
    if (!status) status = ops_input(context, 2, TYPE_FLOAT, &values);
    if (!status) status = ops_input(context, 3, TYPE_BOOL, &blocked);
    if (!status) status = ops_input(context, 4, TYPE_FLOAT, &scale_);
    if (!status && inputs > 5) status = ops_input(context, 5, TYPE_INT64, &sources);
    if (status) return status;
    int same = q.rank == 2 && keys.rank == 4 && values.rank == 4 && blocked.rank == 2;
    for (size_t i = 0; same && i < 4; i++) same = values.dims[i] == keys.dims[i];
    const int64_t B = q.dims[0], kv_rows = keys.dims[0];
    if (!same || (!sources.data && kv_rows != B) || keys.dims[1] * keys.dims[3] != q.dims[1] ||
        blocked.dims[0] != B || blocked.dims[1] != keys.dims[2] || !ops_is_scalar(&scale_) ||
        (sources.data && ops_count(sources.dims, sources.rank) != B))
        return ops_error("attention_mt.CrossAttention: q (B, H); key, value (B', N, S, D) with N * D = H; "
                         "blocked (B, S); a scalar scale; sources (B,), else B' = B");
    const int64_t *rows = sources.data;
    for (int64_t b = 0; rows && b < B; b++)
        if (rows[b] < 0 || rows[b] >= kv_rows) return ops_error("attention_mt.CrossAttention: a source row out of range");
    const Heads shape = {B, keys.dims[1], keys.dims[2], keys.dims[3]};
    const int64_t mixed_dims[2] = {shape.B, shape.N * shape.D}, weight_dims[4] = {shape.B, 1, shape.N, shape.X};
    float *mixed, *weights;
    if ((status = ops_output(context, 0, mixed_dims, 2, (void **)&mixed))) return status;
    if ((status = ops_output(context, 1, weight_dims, 4, (void **)&weights))) return status;
    const CrossTask task = {shape, q.data, keys.data, values.data, blocked.data, rows, *(const float *)scale_.data,
                            mixed, weights};
    ops_parallel(context, cross_row_chosen, (size_t)shape.B, row_tasks(shape.B), (void *)&task);
    return NULL;
}
