/* What the onnxruntime operators of attention_mt share (_ortops.c registers them; the attention
   kernels are in ortops_attention.c): the C API's opaque types, a tensor's view, and the helpers that
   read inputs and make outputs. */
#ifndef ATTENTION_MT_ORTOPS_H
#define ATTENTION_MT_ORTOPS_H

#include <stddef.h>
#include <stdint.h>

typedef struct OrtStatus OrtStatus;
typedef struct OrtApi OrtApi; /* used only as a table of function pointers */
typedef struct OrtValue OrtValue;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;

typedef struct OrtApiBase {
    const OrtApi *(*GetApi)(uint32_t version);
    const char *(*GetVersionString)(void);
} OrtApiBase;

enum { TYPE_FLOAT = 1, TYPE_UINT8 = 2, TYPE_INT32 = 6, TYPE_INT64 = 7, TYPE_BOOL = 9 };
enum { ORT_INVALID_ARGUMENT = 2 };
enum { CUSTOM_OP_VERSION = 16, API_VERSION = 16 };
/* the first C API with KernelContext_ParallelFor (onnxruntime 1.17) */
enum { PARALLEL_API_VERSION = 17 };

/* positions in the OrtApi table */
enum {
    API_CREATE_STATUS = 0,
    API_CREATE_CUSTOM_OP_DOMAIN = 26,
    API_CUSTOM_OP_DOMAIN_ADD = 27,
    API_ADD_CUSTOM_OP_DOMAIN = 28,
    API_GET_TENSOR_MUTABLE_DATA = 51,
    API_GET_TENSOR_ELEMENT_TYPE = 60,
    API_GET_DIMENSIONS_COUNT = 61,
    API_GET_DIMENSIONS = 62,
    API_GET_TENSOR_TYPE_AND_SHAPE = 65,
    API_KERNEL_CONTEXT_GET_INPUT_COUNT = 88,
    API_KERNEL_CONTEXT_GET_INPUT = 90,
    API_KERNEL_CONTEXT_GET_OUTPUT = 91,
    API_RELEASE_STATUS = 93,
    API_RELEASE_TENSOR_TYPE_AND_SHAPE_INFO = 99,
    API_KERNEL_CONTEXT_PARALLEL_FOR = 274,
};

#define HIDDEN __attribute__((visibility("hidden")))

#define MAX_RANK 8

typedef struct {
    void *data;
    int type;
    size_t rank;
    int64_t dims[MAX_RANK];
} Tensor;

HIDDEN OrtStatus *ops_error(const char *message);
HIDDEN OrtStatus *ops_input(OrtKernelContext *context, size_t index, int type, Tensor *t);
HIDDEN OrtStatus *ops_output(OrtKernelContext *context, size_t index, const int64_t *dims, size_t rank, void **data);
HIDDEN OrtStatus *ops_input_count(OrtKernelContext *context, size_t *count);
HIDDEN int64_t ops_count(const int64_t *dims, size_t rank);
HIDDEN int ops_is_scalar(const Tensor *t);
/* task(data, i) for every i < total: in `batches` runs of consecutive i on the session's intra-op
   threads where onnxruntime lends them (1.17 and later) and batches > 1, else in this thread, in
   order. Each i must write only its own outputs: which thread runs it never changes a bit. */
HIDDEN void ops_parallel(OrtKernelContext *context, void (*task)(void *, size_t), size_t total, size_t batches, void *data);

/* the attention kernels (ortops_attention.c) */
HIDDEN OrtStatus *cache_attention(OrtKernelContext *context);
HIDDEN OrtStatus *cross_attention(OrtKernelContext *context);
/* the attention kernels' row loops: AVX2 (nonzero) or portable; the same bits either way */
HIDDEN void attention_kernels(int avx2);

#endif
