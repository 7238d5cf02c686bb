/* onnxruntime custom operators (domain "attention_mt"): the per-row quantization around each int8
   MatMulInteger of a batch-invariant int8 graph, each in one node; and the library's registration of
   every operator, these and the decoder step's attentions (ortops_attention.c).

   The graph spells a row's quantization as ~7 standard operators (Abs, ReduceMax, Max, Div, Shape,
   Expand, QuantizeLinear) and the rescale of its product as 3 (Div, DequantizeLinear, Add). At one
   row a decoder step is ~360 such nodes, most of them this bookkeeping; each node costs onnxruntime
   a dispatch and a pass over a small tensor. These two operators compute the same values, bit for
   bit, in one pass each; onnxruntime's own MatMulInteger stays between them.

   RowQuant(x, levels, zero_point, tiny) -> (q, range)
     x: (..., K) float32; levels, tiny: float32 scalars; zero_point: uint8 scalar
     range[r] = max(max_k |x[r, k]|, tiny)
     q[r, k]  = clamp(round_half_even(x[r, k] / (range[r] / levels)) + zero_point, 0, 255)
     What ReduceMax(Abs(x)), Max(., tiny), Div(., levels) and QuantizeLinear(x, scale, zp) give:
     QuantizeLinear divides by the scale and rounds half to even, as here. (A NaN in x, a model's
     fault, quantizes to an unspecified value, here as in the graph.)

   RowDequant(acc, range, divisor[, bias]) -> y
     acc: (..., N) int32; range: (...) float32 (RowQuant's); divisor: float32 scalar; bias: (N,) float32
     y[r, n] = float(acc[r, n]) * (range[r] / divisor) [+ bias[n]]
     What Div(range, divisor), DequantizeLinear(acc, ., axis 0) and Add(., bias) give. Compiled
     with -ffp-contract=off: a fused multiply-add would round once where they round twice.

   Wide enough, both split their rows over the session's intra-op threads (ops_parallel, through
   the C API's KernelContext_ParallelFor): each row is computed alone, so the bits do not depend on
   the split.

   The library registers them when onnxruntime loads it (SessionOptions.register_custom_ops_library)
   through the C API's function table. That table only grows between releases, so the positions of
   the entries used here (below) hold for every onnxruntime since 1.x; the custom op structure is
   declared at version 16, the first with a compute callback that returns an error. No header of
   onnxruntime is needed to build this file. */

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#else
#define HAVE_AVX2_PATH 0
#endif

#include "ortops.h"

static const OrtApi *api;
static const OrtApi *parallel_api; /* NULL: an onnxruntime without KernelContext_ParallelFor */

typedef void (*ApiFunction)(void);
#define ENTRY(index, type) ((type)(((const ApiFunction *)api)[index]))

OrtStatus *ops_error(const char *message) {
    return ENTRY(API_CREATE_STATUS, OrtStatus *(*)(int, const char *))(ORT_INVALID_ARGUMENT, message);
}

/* A tensor's data, element type and shape; NULL, or an error for an unexpected rank. */
static OrtStatus *described(const OrtValue *value, Tensor *t) {
    OrtTensorTypeAndShapeInfo *info = NULL;
    OrtStatus *status = ENTRY(API_GET_TENSOR_TYPE_AND_SHAPE, OrtStatus *(*)(const OrtValue *, OrtTensorTypeAndShapeInfo **))(value, &info);
    if (status) return status;
    status = ENTRY(API_GET_DIMENSIONS_COUNT, OrtStatus *(*)(const OrtTensorTypeAndShapeInfo *, size_t *))(info, &t->rank);
    if (!status && t->rank > MAX_RANK) status = ops_error("attention_mt: a tensor of rank above 8");
    if (!status) status = ENTRY(API_GET_DIMENSIONS, OrtStatus *(*)(const OrtTensorTypeAndShapeInfo *, int64_t *, size_t))(info, t->dims, t->rank);
    if (!status) status = ENTRY(API_GET_TENSOR_ELEMENT_TYPE, OrtStatus *(*)(const OrtTensorTypeAndShapeInfo *, int *))(info, &t->type);
    ENTRY(API_RELEASE_TENSOR_TYPE_AND_SHAPE_INFO, void (*)(OrtTensorTypeAndShapeInfo *))(info);
    if (status) return status;
    return ENTRY(API_GET_TENSOR_MUTABLE_DATA, OrtStatus *(*)(OrtValue *, void **))((OrtValue *)value, &t->data);
}

OrtStatus *ops_input(OrtKernelContext *context, size_t index, int type, Tensor *t) {
    const OrtValue *value = NULL;
    OrtStatus *status = ENTRY(API_KERNEL_CONTEXT_GET_INPUT, OrtStatus *(*)(const OrtKernelContext *, size_t, const OrtValue **))(context, index, &value);
    if (status) return status;
    if (!value) return ops_error("attention_mt: a required input is missing");
    status = described(value, t);
    if (!status && t->type != type) status = ops_error("attention_mt: an input of the wrong element type");
    return status;
}

OrtStatus *ops_output(OrtKernelContext *context, size_t index, const int64_t *dims, size_t rank, void **data) {
    OrtValue *value = NULL;
    OrtStatus *status = ENTRY(API_KERNEL_CONTEXT_GET_OUTPUT, OrtStatus *(*)(OrtKernelContext *, size_t, const int64_t *, size_t, OrtValue **))(context, index, dims, rank, &value);
    if (status) return status;
    return ENTRY(API_GET_TENSOR_MUTABLE_DATA, OrtStatus *(*)(OrtValue *, void **))(value, data);
}

OrtStatus *ops_input_count(OrtKernelContext *context, size_t *count) {
    return ENTRY(API_KERNEL_CONTEXT_GET_INPUT_COUNT, OrtStatus *(*)(const OrtKernelContext *, size_t *))(context, count);
}

int64_t ops_count(const int64_t *dims, size_t rank) {
    int64_t n = 1;
    for (size_t i = 0; i < rank; i++) n *= dims[i];
    return n;
}

int ops_is_scalar(const Tensor *t) { return ops_count(t->dims, t->rank) == 1; }

typedef OrtStatus *(*ParallelFor)(const OrtKernelContext *, void (*)(void *, size_t), size_t, size_t, void *);

void ops_parallel(OrtKernelContext *context, void (*task)(void *, size_t), size_t total, size_t batches, void *data) {
    if (parallel_api && batches > 1 && total > 1) {
        const ApiFunction *table = (const ApiFunction *)parallel_api;
        OrtStatus *status = ((ParallelFor)table[API_KERNEL_CONTEXT_PARALLEL_FOR])(
            context, task, total, batches < total ? batches : total, data);
        if (!status) return;
        /* a build without the kernel context API refuses before running any: run them here */
        ((void (*)(OrtStatus *))table[API_RELEASE_STATUS])(status);
    }
    for (size_t i = 0; i < total; i++) task(data, i);
}

/* ---- RowQuant ---- */

/* q = clamp(round_half_even(x / scale), -zp, 255 - zp) + zp, as MLAS's QuantizeLinear: the clamp
   in float, the rounding by the CPU's conversion (round to nearest even). */
static void quantize_row(const float *x, int64_t k, float scale, int zp, uint8_t *q) {
    const float low = (float)-zp, high = (float)(255 - zp);
    for (int64_t i = 0; i < k; i++) {
        float v = x[i] / scale;
        v = v < low ? low : (v > high ? high : v);
        q[i] = (uint8_t)(lrintf(v) + zp);
    }
}

static float row_range(const float *x, int64_t k, float tiny) {
    float m = 0.0f;
    for (int64_t i = 0; i < k; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m > tiny ? m : tiny;
}

static void dequantize_row(const int32_t *a, int64_t n, float scale, const float *b, float *y) {
    if (b)
        for (int64_t i = 0; i < n; i++) y[i] = (float)a[i] * scale + b[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = (float)a[i] * scale;
}

#if HAVE_AVX2_PATH
/* The same eight at a time. Division, the clamp, the conversion's rounding, the multiply and the add
   are each exact IEEE operations, so the lanes give what the scalar loops give. */
__attribute__((target("avx2"))) static void quantize_row_avx2(const float *x, int64_t k, float scale, int zp, uint8_t *q) {
    const __m256 s = _mm256_set1_ps(scale), lo = _mm256_set1_ps((float)-zp), hi = _mm256_set1_ps((float)(255 - zp));
    const __m256i z = _mm256_set1_epi32(zp);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s), lo), hi);
        __m256i r = _mm256_add_epi32(_mm256_cvtps_epi32(v), z); /* 0..255 in each lane */
        __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storel_epi64((__m128i *)(q + i), _mm_packus_epi16(words, words));
    }
    quantize_row(x + i, k - i, scale, zp, q + i);
}

__attribute__((target("avx2"))) static float row_range_avx2(const float *x, int64_t k, float tiny) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), magnitude));
    float lanes[8], best = row_range(x + i, k - i, 0.0f);
    _mm256_storeu_ps(lanes, m);
    for (int j = 0; j < 8; j++) best = lanes[j] > best ? lanes[j] : best;
    return best > tiny ? best : tiny;
}

__attribute__((target("avx2"))) static void dequantize_row_avx2(const int32_t *a, int64_t n, float scale, const float *b, float *y) {
    const __m256 s = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(a + i))), s);
        _mm256_storeu_ps(y + i, b ? _mm256_add_ps(v, _mm256_loadu_ps(b + i)) : v);
    }
    dequantize_row(a + i, n - i, scale, b ? b + i : NULL, y + i);
}
#endif

typedef struct {
    void (*quantize)(const float *, int64_t, float, int, uint8_t *);
    float (*range)(const float *, int64_t, float);
    void (*dequantize)(const int32_t *, int64_t, float, const float *, float *);
} Kernels;

static const Kernels portable_kernels = {quantize_row, row_range, dequantize_row};
#if HAVE_AVX2_PATH
static const Kernels avx2_kernels = {quantize_row_avx2, row_range_avx2, dequantize_row_avx2};
#endif
/* one pointer, set as each session registers the operators: a running session reads either table,
   and both give the same bits */
static const Kernels *kernels = &portable_kernels;

/* Rows go to the intra-op threads in runs of about 64k elements (256 KB of floats), where a hand-off
   to another thread costs a small part of the run: at 32 rows the shipped model's 8,000-wide rescale
   splits, its 256- and 1,024-wide ones do not (runs of 16k were slower there), and a one-row step
   never does. */
static size_t runs_of(int64_t rows, int64_t width) { return (size_t)(rows * width / 65536); }

typedef struct {
    const float *x;
    int64_t k;
    float levels, tiny;
    int zp;
    uint8_t *q;
    float *range;
} QuantRows;

static void quant_row(void *data, size_t r) {
    const QuantRows *t = data;
    const float *x = t->x + (int64_t)r * t->k;
    t->range[r] = kernels->range(x, t->k, t->tiny);
    kernels->quantize(x, t->k, t->range[r] / t->levels, t->zp, t->q + (int64_t)r * t->k);
}

static OrtStatus *row_quant(OrtKernelContext *context) {
    Tensor x, levels, zero_point, tiny;
    OrtStatus *status = ops_input(context, 0, TYPE_FLOAT, &x);
    if (!status) status = ops_input(context, 1, TYPE_FLOAT, &levels);
    if (!status) status = ops_input(context, 2, TYPE_UINT8, &zero_point);
    if (!status) status = ops_input(context, 3, TYPE_FLOAT, &tiny);
    if (status) return status;
    if (x.rank < 1 || !ops_is_scalar(&levels) || !ops_is_scalar(&zero_point) || !ops_is_scalar(&tiny))
        return ops_error("attention_mt.RowQuant: x of rank 1 or more; levels, zero_point and tiny scalars");
    uint8_t *q;
    float *range;
    if ((status = ops_output(context, 0, x.dims, x.rank, (void **)&q))) return status;
    if ((status = ops_output(context, 1, x.dims, x.rank - 1, (void **)&range))) return status;
    const QuantRows task = {x.data, x.dims[x.rank - 1], *(const float *)levels.data, *(const float *)tiny.data,
                            *(const uint8_t *)zero_point.data, q, range};
    const int64_t rows = ops_count(x.dims, x.rank - 1);
    ops_parallel(context, quant_row, (size_t)rows, runs_of(rows, task.k), (void *)&task);
    return NULL;
}

/* ---- RowDequant ---- */

typedef struct {
    const int32_t *acc;
    const float *range;
    float divisor;
    const float *bias;
    int64_t n;
    float *y;
} DequantRows;

static void dequant_row(void *data, size_t r) {
    const DequantRows *t = data;
    kernels->dequantize(t->acc + (int64_t)r * t->n, t->n, t->range[r] / t->divisor, t->bias, t->y + (int64_t)r * t->n);
}

static OrtStatus *row_dequant(OrtKernelContext *context) {
    Tensor acc, range, divisor, bias;
    size_t inputs = 0;
    OrtStatus *status = ops_input_count(context, &inputs);
    if (!status) status = ops_input(context, 0, TYPE_INT32, &acc);
    if (!status) status = ops_input(context, 1, TYPE_FLOAT, &range);
    if (!status) status = ops_input(context, 2, TYPE_FLOAT, &divisor);
    const int with_bias = inputs > 3;
    if (!status && with_bias) status = ops_input(context, 3, TYPE_FLOAT, &bias);
    if (status) return status;
    if (acc.rank < 1 || !ops_is_scalar(&divisor) || ops_count(range.dims, range.rank) != ops_count(acc.dims, acc.rank - 1))
        return ops_error("attention_mt.RowDequant: acc of rank 1 or more, a range per row, a scalar divisor");
    const int64_t n = acc.dims[acc.rank - 1], rows = ops_count(acc.dims, acc.rank - 1);
    if (with_bias && ops_count(bias.dims, bias.rank) != n) return ops_error("attention_mt.RowDequant: a bias per column");
    float *y;
    if ((status = ops_output(context, 0, acc.dims, acc.rank, (void **)&y))) return status;
    const DequantRows task = {acc.data, range.data, *(const float *)divisor.data,
                              with_bias ? (const float *)bias.data : NULL, n, y};
    ops_parallel(context, dequant_row, (size_t)rows, runs_of(rows, n), (void *)&task);
    return NULL;
}

/* ---- the custom op structure, at version 16 ---- */

typedef struct OrtCustomOp OrtCustomOp;
struct OrtCustomOp {
    uint32_t version;
    void *(*CreateKernel)(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info);
    const char *(*GetName)(const OrtCustomOp *op);
    const char *(*GetExecutionProviderType)(const OrtCustomOp *op);
    int (*GetInputType)(const OrtCustomOp *op, size_t index);
    size_t (*GetInputTypeCount)(const OrtCustomOp *op);
    int (*GetOutputType)(const OrtCustomOp *op, size_t index);
    size_t (*GetOutputTypeCount)(const OrtCustomOp *op);
    void (*KernelCompute)(void *kernel, OrtKernelContext *context);
    void (*KernelDestroy)(void *kernel);
    int (*GetInputCharacteristic)(const OrtCustomOp *op, size_t index);
    int (*GetOutputCharacteristic)(const OrtCustomOp *op, size_t index);
    int (*GetInputMemoryType)(const OrtCustomOp *op, size_t index);
    int (*GetVariadicInputMinArity)(const OrtCustomOp *op);
    int (*GetVariadicInputHomogeneity)(const OrtCustomOp *op);
    int (*GetVariadicOutputMinArity)(const OrtCustomOp *op);
    int (*GetVariadicOutputHomogeneity)(const OrtCustomOp *op);
    OrtStatus *(*CreateKernelV2)(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info, void **kernel);
    OrtStatus *(*KernelComputeV2)(void *kernel, OrtKernelContext *context);
    OrtStatus *(*InferOutputShapeFn)(const OrtCustomOp *op, void *context);
};

enum { REQUIRED = 0, OPTIONAL = 1 };

typedef struct {
    OrtCustomOp op;
    const char *name;
    const int *inputs;
    size_t n_inputs, n_required;
    const int *outputs;
    size_t n_outputs;
    OrtStatus *(*compute)(OrtKernelContext *);
} Operator;

static const Operator *of(const OrtCustomOp *op) { return (const Operator *)op; }
static const char *op_name(const OrtCustomOp *op) { return of(op)->name; }
static const char *op_provider(const OrtCustomOp *op) { (void)op; return NULL; }
static int op_input_type(const OrtCustomOp *op, size_t i) { return of(op)->inputs[i]; }
static size_t op_input_count(const OrtCustomOp *op) { return of(op)->n_inputs; }
static int op_output_type(const OrtCustomOp *op, size_t i) { return of(op)->outputs[i]; }
static size_t op_output_count(const OrtCustomOp *op) { return of(op)->n_outputs; }
static int op_input_characteristic(const OrtCustomOp *op, size_t i) { return i < of(op)->n_required ? REQUIRED : OPTIONAL; }
static int op_output_characteristic(const OrtCustomOp *op, size_t i) { (void)op; (void)i; return REQUIRED; }
static int op_memory_type(const OrtCustomOp *op, size_t i) { (void)op; (void)i; return 0; }
static int op_arity(const OrtCustomOp *op) { (void)op; return 1; }
static int op_homogeneous(const OrtCustomOp *op) { (void)op; return 1; }
/* the kernel is the operator itself: it keeps no state */
static void *op_create(const OrtCustomOp *op, const OrtApi *a, const OrtKernelInfo *info) { (void)a; (void)info; return (void *)op; }
static OrtStatus *op_create_v2(const OrtCustomOp *op, const OrtApi *a, const OrtKernelInfo *info, void **kernel) {
    (void)a; (void)info;
    *kernel = (void *)op;
    return NULL;
}
static void op_compute(void *kernel, OrtKernelContext *context) { (void)kernel; (void)context; }
static OrtStatus *op_compute_v2(void *kernel, OrtKernelContext *context) { return ((const Operator *)kernel)->compute(context); }
static void op_destroy(void *kernel) { (void)kernel; }

#define OPERATOR(NAME, INPUTS, REQUIRED_INPUTS, OUTPUTS, COMPUTE)                                          \
    {{CUSTOM_OP_VERSION, op_create, op_name, op_provider, op_input_type, op_input_count, op_output_type,     \
      op_output_count, op_compute, op_destroy, op_input_characteristic, op_output_characteristic,            \
      op_memory_type, op_arity, op_homogeneous, op_arity, op_homogeneous, op_create_v2, op_compute_v2, NULL}, \
     NAME, INPUTS, sizeof(INPUTS) / sizeof(int), REQUIRED_INPUTS, OUTPUTS, sizeof(OUTPUTS) / sizeof(int), COMPUTE}

static const int quant_inputs[] = {TYPE_FLOAT, TYPE_FLOAT, TYPE_UINT8, TYPE_FLOAT};
static const int quant_outputs[] = {TYPE_UINT8, TYPE_FLOAT};
static const int dequant_inputs[] = {TYPE_INT32, TYPE_FLOAT, TYPE_FLOAT, TYPE_FLOAT};
static const int dequant_outputs[] = {TYPE_FLOAT};
static const int cache_inputs_[] = {TYPE_FLOAT, TYPE_FLOAT, TYPE_FLOAT, TYPE_FLOAT, TYPE_FLOAT, TYPE_INT64, TYPE_FLOAT};
static const int cross_inputs_[] = {TYPE_FLOAT, TYPE_FLOAT, TYPE_FLOAT, TYPE_BOOL, TYPE_FLOAT, TYPE_INT64};
static const int attention_outputs[] = {TYPE_FLOAT, TYPE_FLOAT};

static Operator operators[] = {
    OPERATOR("RowQuant", quant_inputs, 4, quant_outputs, row_quant),
    OPERATOR("RowDequant", dequant_inputs, 3, dequant_outputs, row_dequant),
    OPERATOR("CacheAttention", cache_inputs_, 7, attention_outputs, cache_attention),
    OPERATOR("CrossAttention", cross_inputs_, 5, attention_outputs, cross_attention),
};

#define DOMAIN "attention_mt"

/* onnxruntime's entry point: adds the domain's operators to the session options. */
OrtStatus *RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base) {
    api = base->GetApi(API_VERSION);
    /* ATTENTION_MT_SERIAL_OPS: every operator in the calling thread, as benchmarks compare both */
    const char *serial = getenv("ATTENTION_MT_SERIAL_OPS");
    parallel_api = serial && *serial && strcmp(serial, "0") != 0 ? NULL : base->GetApi(PARALLEL_API_VERSION);
    const Kernels *chosen = &portable_kernels;
#if HAVE_AVX2_PATH
    /* ATTENTION_MT_PORTABLE_OPS: the portable loops on any CPU, as the tests compare both */
    const char *portable = getenv("ATTENTION_MT_PORTABLE_OPS");
    if (!(portable && *portable && strcmp(portable, "0") != 0) && __builtin_cpu_supports("avx2"))
        chosen = &avx2_kernels;
#endif
    kernels = chosen;
#if HAVE_AVX2_PATH
    attention_kernels(chosen == &avx2_kernels);
#endif
    if (!api) return NULL; /* an onnxruntime older than 1.16: the graph fails to load, naming the op */
    OrtCustomOpDomain *domain = NULL;
    OrtStatus *status = ENTRY(API_CREATE_CUSTOM_OP_DOMAIN, OrtStatus *(*)(const char *, OrtCustomOpDomain **))(DOMAIN, &domain);
    for (size_t i = 0; !status && i < sizeof(operators) / sizeof(operators[0]); i++)
        status = ENTRY(API_CUSTOM_OP_DOMAIN_ADD, OrtStatus *(*)(OrtCustomOpDomain *, const OrtCustomOp *))(domain, &operators[i].op);
    if (!status) status = ENTRY(API_ADD_CUSTOM_OP_DOMAIN, OrtStatus *(*)(OrtSessionOptions *, OrtCustomOpDomain *))(options, domain);
    return status;
}
