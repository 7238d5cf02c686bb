/* The decoding loop's small, frequent steps in C, where numpy takes several passes or calls:
   the beam's selection and ranking, and the moves and writes of the state between steps.

   top_per_row(values, n, out[, avx2]) -> bool
     values: (N, V) float32, C-contiguous (any object with the buffer protocol: a numpy array)
     out:    (N, n) int64, C-contiguous, writable: each row's columns of its n largest values,
             ascending by column. Among equal values the lower columns are chosen.
     Returns False, leaving `out` unspecified, when a row holds a NaN (the caller decides what
     a NaN means; numpy's selection orders it above everything). avx2=False takes the portable
     path on any CPU (the tests check both).

   Each row is read once: a heap keeps the n best so far (its root the worst of them), and eight
   values at a time are compared against that root, so a block none of whose values can enter
   costs one comparison (AVX2 where the CPU has it, checked at run time). A value enters only when
   it is strictly greater than the root: columns arrive in ascending order, so among equal values
   the earlier, lower column stays. Every kernel lets go of the interpreter lock while it works
   on more than RELEASE_ABOVE bytes, and holds it for less.

   beam_candidates(log_probs, cum, K, n, rows, tokens, totals[, avx2]) -> bool
     log_probs: (A*K, V) float32; cum: (A*K,) float64, each row's cumulative log-prob
     rows, tokens: (A, C) int64 and totals (A, C) float64, C = min(2K, K*n), written: each sentence's
             C best continuations over its K rows' n best tokens (top_per_row), best first; equal
             totals go to the lower row, then the lower token, as numpy's stable sort leaves them.
     Returns False when a total is NaN (numpy then answers).

   move_rows(arrays, rows, moved) -> None
     arrays: a tuple of C-contiguous, writable arrays, batch first, at least len(rows) rows each
     rows:   (n,) int64, the row each place takes; moved: int64, the places whose row changes
     In place, every array: x[moved] = x[rows[moved]], the sources read before any is overwritten.
     What a beam's reorder does to each of its caches (two fancy-indexing passes, or a take), in one.

   write_slots(caches, values, positions) -> None
     caches:    a tuple of (B, H, P, D) float32 arrays, C-contiguous, writable (a step's KV caches)
     values:    a tuple as long, of (B, H, D) float32 arrays, C-contiguous (the step's keys, values)
     positions: (B,) int64, each row's slot, in 0..P-1
     Row b's values[b] go to cache[b, :, positions[b], :], for every pair: what numpy's fancy
     assignment does a cache a call (6 calls a step for a 3-layer decoder), in one.

   greedy_choose(log_probs, rows, step, lengths, eos, tokens, scores, places, chosen[, avx2]) -> int
     log_probs: (N, V) float32, C-contiguous; rows: (N,) int64, each row's sentence in 0..B-1
     lengths: (B,) int64, each sentence's most tokens; step: the tokens every row has so far
     tokens, places: (B, T) int64 and scores: (B, T) float32, written at [rows[i], step]: row i's
             best token (the lowest column among equal values, as numpy's argmax), its log-prob, i
     chosen: (N,) int64, written: each row's best token
     Returns how many rows end (their token is eos, or they reach their length), or -1, nothing
     written, when a row holds a NaN. A greedy step's choice and bookkeeping in one call: numpy took
     an argmax, a gather and a loop over the rows in Python.

   Built as an optional extension (pyproject.toml): without a C compiler the package installs
   without it and service/engine/native.py falls back to numpy. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

#define MAX_N 64

typedef struct {
    float value[MAX_N];
    int64_t column[MAX_N];
    int64_t size;
} Heap;

/* a is worse than b: smaller, or equal and at a higher column */
static inline int worse(float av, int64_t ac, float bv, int64_t bc) { return av < bv || (av == bv && ac > bc); }

static inline void heap_push(Heap *h, float v, int64_t c) {
    int64_t i = h->size++;
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (worse(h->value[parent], h->column[parent], v, c)) break;
        h->value[i] = h->value[parent];
        h->column[i] = h->column[parent];
        i = parent;
    }
    h->value[i] = v;
    h->column[i] = c;
}

static inline void heap_replace_root(Heap *h, float v, int64_t c) {
    int64_t i = 0, n = h->size;
    for (;;) {
        int64_t left = 2 * i + 1, right = left + 1, m = i;
        float mv = v;
        int64_t mc = c;
        if (left < n && worse(h->value[left], h->column[left], mv, mc)) {
            m = left;
            mv = h->value[left];
            mc = h->column[left];
        }
        if (right < n && worse(h->value[right], h->column[right], mv, mc)) m = right;
        if (m == i) break;
        h->value[i] = h->value[m];
        h->column[i] = h->column[m];
        i = m;
    }
    h->value[i] = v;
    h->column[i] = c;
}

/* 0 on a NaN */
static inline int offer(Heap *h, int64_t n, float v, int64_t c) {
    if (isnan(v)) return 0;
    if (h->size < n)
        heap_push(h, v, c);
    else if (v > h->value[0])
        heap_replace_root(h, v, c);
    return 1;
}

static int64_t scan_scalar(Heap *h, int64_t n, const float *row, int64_t from, int64_t V) {
    for (int64_t c = from; c < V; c++)
        if (!offer(h, n, row[c], c)) return -1;
    return V;
}

#ifdef HAVE_AVX2_PATH
__attribute__((target("avx2"))) static int64_t scan_avx2(Heap *h, int64_t n, const float *row, int64_t from, int64_t V) {
    int64_t c = from;
    for (; c + 8 <= V; c += 8) {
        /* not less-or-equal, unordered: true for a value above the root and for a NaN */
        __m256 block = _mm256_loadu_ps(row + c);
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(block, _mm256_set1_ps(h->value[0]), _CMP_NLE_UQ));
        while (mask) {
            int k = __builtin_ctz(mask);
            mask &= mask - 1;
            if (!offer(h, n, row[c + k], c + k)) return -1;
        }
    }
    return c;
}
#endif

/* one row's n best columns into out, ascending; 1 done, 0 a NaN */
static int select_row(const float *row, int64_t V, int64_t n, int64_t *out, int avx2) {
    Heap h;
    h.size = 0;
    int64_t c = 0;
    for (; c < V && h.size < n; c++)
        if (!offer(&h, n, row[c], c)) return 0;
#ifdef HAVE_AVX2_PATH
    if (avx2) {
        c = scan_avx2(&h, n, row, c, V);
        if (c < 0) return 0;
    }
#else
    (void)avx2;
#endif
    if (scan_scalar(&h, n, row, c, V) < 0) return 0;
    for (int64_t i = 0; i < n; i++) {  /* the heap's columns, ascending (n is small: insertion sort) */
        int64_t x = h.column[i], j = i - 1;
        while (j >= 0 && out[j] > x) {
            out[j + 1] = out[j];
            j--;
        }
        out[j + 1] = x;
    }
    return 1;
}

static int select_rows(const float *values, int64_t N, int64_t V, int64_t n, int64_t *out, int avx2) {
    for (int64_t r = 0; r < N; r++)
        if (!select_row(values + r * V, V, n, out + r * n, avx2)) return 0;
    return 1;
}

static int cpu_has_avx2(void) {
#ifdef HAVE_AVX2_PATH
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

static int AVX2 = 0;

/* bytes a kernel reads or writes before it lets go of the interpreter lock: under load the event
   loop takes the lock as soon as it is free, and the decoding thread then waits for it back (up to
   the interpreter's 5 ms switch interval), which costs more than the few microseconds of a small call */
#define RELEASE_ABOVE ((size_t)1 << 20)

static PyThreadState *release_if_large(size_t bytes) { return bytes > RELEASE_ABOVE ? PyEval_SaveThread() : NULL; }

static void restore(PyThreadState *state) {
    if (state) PyEval_RestoreThread(state);
}

static int is_int64(const Py_buffer *b) {
    return b->itemsize == 8 && (strcmp(b->format, "q") == 0 || strcmp(b->format, "l") == 0);
}

/* objects[i]'s buffer into b[i], C-contiguous with its format, writable from index `writable` on;
   how many were taken (under n: the buffer protocol's error is set) */
static int take_buffers(PyObject **objects, int n, int writable, Py_buffer *b) {
    int held = 0;
    for (; held < n; held++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (held >= writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objects[held], &b[held], flags) < 0) break;
    }
    return held;
}

/* the buffers released; 0 with a ValueError set for a problem ("": the buffer protocol's error is
   already set), 1 without one */
static int released(Py_buffer *b, int held, const char *problem) {
    for (int i = 0; i < held; i++) PyBuffer_Release(&b[i]);
    if (problem && *problem) PyErr_SetString(PyExc_ValueError, problem);
    return problem == NULL;
}

static PyObject *top_per_row(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *values_obj, *out_obj;
    Py_ssize_t n;
    int avx2 = AVX2;
    if (!PyArg_ParseTuple(args, "OnO|p", &values_obj, &n, &out_obj, &avx2)) return NULL;
    Py_buffer values, out;
    if (PyObject_GetBuffer(values_obj, &values, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&values);
        return NULL;
    }
    const char *problem = NULL;
    if (values.ndim != 2 || values.itemsize != 4 || strcmp(values.format, "f") != 0)
        problem = "values must be a 2-D float32 array";
    else if (out.ndim != 2 || !is_int64(&out))
        problem = "out must be a 2-D int64 array";
    else if (n < 1 || n > MAX_N || n > values.shape[1])
        problem = "n must be in 1..min(64, columns)";
    else if (out.shape[0] != values.shape[0] || out.shape[1] != n)
        problem = "out must be (rows, n)";
    int done = 0;
    if (!problem) {
        PyThreadState *state = release_if_large((size_t)values.len);
        done = select_rows((const float *)values.buf, values.shape[0], values.shape[1], n, (int64_t *)out.buf, avx2 && AVX2);
        restore(state);
    }
    PyBuffer_Release(&values);
    PyBuffer_Release(&out);
    if (problem) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    return PyBool_FromLong(done);
}


/* ---- beam_candidates --------------------------------------------------------------------------- */

typedef struct {
    double total;
    int64_t index;  /* k * n + j: the sentence's row k, its j-th column */
} Candidate;

/* best first; equal totals by index: the lower row, then the lower column (a stable sort's order) */
static int best_first(const void *a, const void *b) {
    const Candidate *x = a, *y = b;
    if (x->total != y->total) return x->total > y->total ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

typedef struct {
    const float *log_probs;  /* (A * K, V) */
    const double *cum;       /* (A * K,) */
    int64_t A, K, V, n, keep;
    int64_t *rows, *tokens;  /* (A, keep) */
    double *totals;          /* (A, keep) */
} Ranking;

/* 1 done, 0 a NaN */
static int rank(const Ranking *q, int64_t *columns, Candidate *candidates, int avx2) {
    const int64_t K = q->K, n = q->n, V = q->V;
    for (int64_t a = 0; a < q->A; a++) {
        for (int64_t k = 0; k < K; k++) {
            int64_t r = a * K + k;
            if (!select_row(q->log_probs + r * V, V, n, columns + k * n, avx2)) return 0;
            for (int64_t j = 0; j < n; j++) {
                double total = q->cum[r] + (double)q->log_probs[r * V + columns[k * n + j]];
                if (isnan(total)) return 0;
                candidates[k * n + j].total = total;
                candidates[k * n + j].index = k * n + j;
            }
        }
        qsort(candidates, (size_t)(K * n), sizeof(Candidate), best_first);
        for (int64_t i = 0; i < q->keep; i++) {
            int64_t index = candidates[i].index, at = a * q->keep + i;
            q->rows[at] = a * K + index / n;
            q->tokens[at] = columns[index];
            q->totals[at] = candidates[i].total;
        }
    }
    return 1;
}

static PyObject *beam_candidates(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[5];
    Py_ssize_t K, n;
    int avx2 = AVX2;
    if (!PyArg_ParseTuple(args, "OOnnOOO|p", &objects[0], &objects[1], &K, &n, &objects[2], &objects[3], &objects[4],
                          &avx2))
        return NULL;
    Py_buffer b[5];
    int held = take_buffers(objects, 5, 2, b);
    const char *problem = held < 5 ? "" : NULL;
    Py_buffer *lp = &b[0], *cum = &b[1], *rows = &b[2], *tokens = &b[3], *totals = &b[4];
    if (!problem && (lp->ndim != 2 || lp->itemsize != 4 || strcmp(lp->format, "f") != 0))
        problem = "log_probs must be a 2-D float32 array";
    else if (!problem && (cum->ndim != 1 || cum->itemsize != 8 || strcmp(cum->format, "d") != 0 ||
                          cum->shape[0] != lp->shape[0]))
        problem = "cum must be a float64 array, one a row";
    else if (!problem && (K < 1 || lp->shape[0] % K != 0))
        problem = "the rows must be whole sentences of K";
    else if (!problem && (n < 1 || n > MAX_N || n > lp->shape[1]))
        problem = "n must be in 1..min(64, columns)";
    int64_t A = problem ? 0 : lp->shape[0] / K, keep = 2 * K < K * n ? 2 * K : K * n;
    if (!problem && (rows->ndim != 2 || !is_int64(rows) || tokens->ndim != 2 || !is_int64(tokens) ||
                     totals->ndim != 2 || totals->itemsize != 8 || strcmp(totals->format, "d") != 0))
        problem = "rows and tokens must be int64, totals float64, 2-D";
    else if (!problem && (rows->shape[0] != A || rows->shape[1] != keep || tokens->shape[0] != A ||
                          tokens->shape[1] != keep || totals->shape[0] != A || totals->shape[1] != keep))
        problem = "rows, tokens and totals must be (sentences, min(2K, K*n))";
    int done = 0;
    if (!problem) {
        int64_t *columns = PyMem_Malloc((size_t)(K * n) * sizeof(int64_t));
        Candidate *candidates = PyMem_Malloc((size_t)(K * n) * sizeof(Candidate));
        if (!columns || !candidates) {
            problem = "out of memory";
        } else {
            Ranking q = {(const float *)lp->buf, (const double *)cum->buf, A, K, lp->shape[1], n, keep,
                         (int64_t *)rows->buf, (int64_t *)tokens->buf, (double *)totals->buf};
            PyThreadState *state = release_if_large((size_t)lp->len);
            done = rank(&q, columns, candidates, avx2 && AVX2);
            restore(state);
        }
        PyMem_Free(columns);
        PyMem_Free(candidates);
    }
    if (!released(b, held, problem)) return NULL;
    return PyBool_FromLong(done);
}

/* ---- move_rows ------------------------------------------------------------------------------- */

static PyObject *move_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *arrays, *rows_obj, *moved_obj;
    if (!PyArg_ParseTuple(args, "O!OO", &PyTuple_Type, &arrays, &rows_obj, &moved_obj)) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(arrays), held = 0;
    Py_buffer rows, moved;
    if (PyObject_GetBuffer(rows_obj, &rows, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(moved_obj, &moved, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&rows);
        return NULL;
    }
    Py_buffer *b = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Py_buffer));
    const char *problem = b ? NULL : "out of memory";
    if (!problem && (rows.ndim != 1 || !is_int64(&rows) || moved.ndim != 1 || !is_int64(&moved)))
        problem = "rows and moved must be 1-D int64 arrays";
    size_t largest = 0;
    Py_ssize_t shortest = PY_SSIZE_T_MAX;
    const int64_t *row = rows.buf, *place = moved.buf;
    for (; !problem && held < count; held++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(arrays, held), &b[held], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            problem = "";
            break;
        }
        Py_ssize_t length = b[held].ndim ? b[held].shape[0] : 0;
        if (b[held].ndim < 1 || length < rows.shape[0]) {
            problem = "each array needs a row for every entry of rows";
            held++;
            break;
        }
        size_t row_bytes = length ? (size_t)(b[held].len / length) : 0;
        largest = row_bytes > largest ? row_bytes : largest;
        shortest = length < shortest ? length : shortest;
    }
    for (Py_ssize_t i = 0; !problem && count && i < moved.shape[0]; i++)
        if (place[i] < 0 || place[i] >= rows.shape[0] || row[place[i]] < 0 || row[place[i]] >= shortest)
            problem = "a moved row is outside the arrays";
    char *temp = NULL;
    if (!problem && count && moved.shape[0]) {
        temp = PyMem_Malloc(largest * (size_t)moved.shape[0]);
        if (!temp) problem = "out of memory";
    }
    if (!problem && temp) {
        PyThreadState *state = release_if_large(2 * largest * (size_t)moved.shape[0] * (size_t)count);
        for (Py_ssize_t a = 0; a < count; a++) {
            char *x = b[a].buf;
            size_t row_bytes = (size_t)(b[a].len / b[a].shape[0]);
            /* read every source row first: a row may be both read and overwritten */
            for (Py_ssize_t i = 0; i < moved.shape[0]; i++)
                memcpy(temp + (size_t)i * row_bytes, x + (size_t)row[place[i]] * row_bytes, row_bytes);
            for (Py_ssize_t i = 0; i < moved.shape[0]; i++)
                memcpy(x + (size_t)place[i] * row_bytes, temp + (size_t)i * row_bytes, row_bytes);
        }
        restore(state);
    }
    PyMem_Free(temp);
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&b[i]);
    PyMem_Free(b);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&moved);
    if (!problem) Py_RETURN_NONE;
    if (*problem) PyErr_SetString(PyExc_ValueError, problem);
    return NULL;
}

/* ---- write_slots ---------------------------------------------------------------------------- */

typedef struct {
    Py_buffer cache, value;
} SlotPair;

static const char *check_pair(const SlotPair *p, const Py_buffer *positions) {
    const Py_buffer *c = &p->cache, *v = &p->value;
    if (c->ndim != 4 || c->itemsize != 4 || strcmp(c->format, "f") != 0) return "each cache must be a 4-D float32 array";
    if (v->ndim != 3 || v->itemsize != 4 || strcmp(v->format, "f") != 0) return "each value must be a 3-D float32 array";
    if (v->shape[0] != c->shape[0] || v->shape[1] != c->shape[1] || v->shape[2] != c->shape[3])
        return "a value must be (B, H, D) for its (B, H, P, D) cache";
    if (positions->shape[0] != c->shape[0]) return "positions must have one slot a row";
    return NULL;
}

static void copy_slots(const SlotPair *p, const int64_t *positions) {
    const Py_ssize_t B = p->cache.shape[0], H = p->cache.shape[1], P = p->cache.shape[2], D = p->cache.shape[3];
    float *cache = (float *)p->cache.buf;
    const float *value = (const float *)p->value.buf;
    for (Py_ssize_t b = 0; b < B; b++)
        for (Py_ssize_t h = 0; h < H; h++)
            memcpy(cache + ((b * H + h) * P + positions[b]) * D, value + (b * H + h) * D, (size_t)D * sizeof(float));
}

/* the buffers of every pair, or NULL with an exception set; *held counts the pairs to release */
static const char *take_pairs(PyObject *caches, PyObject *values, const Py_buffer *positions, SlotPair *pairs,
                              Py_ssize_t count, Py_ssize_t *held) {
    for (*held = 0; *held < count; (*held)++) {
        SlotPair *p = &pairs[*held];
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(caches, *held), &p->cache, flags | PyBUF_WRITABLE) < 0) return "";
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(values, *held), &p->value, flags) < 0) {
            PyBuffer_Release(&p->cache);
            return "";
        }
        const char *problem = check_pair(p, positions);
        if (problem) {
            (*held)++;
            return problem;
        }
        const int64_t *slot = (const int64_t *)positions->buf;
        for (Py_ssize_t b = 0; b < positions->shape[0]; b++)
            if (slot[b] < 0 || slot[b] >= p->cache.shape[2]) {
                (*held)++;
                return "a position is outside its cache";
            }
    }
    return NULL;
}

static PyObject *write_slots(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *caches, *values, *positions_obj;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyTuple_Type, &caches, &PyTuple_Type, &values, &positions_obj)) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(caches), held = 0;
    if (PyTuple_GET_SIZE(values) != count) {
        PyErr_SetString(PyExc_ValueError, "one value a cache");
        return NULL;
    }
    Py_buffer positions;
    if (PyObject_GetBuffer(positions_obj, &positions, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    SlotPair *pairs = PyMem_Calloc((size_t)(count ? count : 1), sizeof(SlotPair));
    const char *problem = NULL;
    if (!pairs)
        problem = "out of memory";
    else if (positions.ndim != 1 || !is_int64(&positions))
        problem = "positions must be a 1-D int64 array";
    else
        problem = take_pairs(caches, values, &positions, pairs, count, &held);
    if (!problem) {
        const int64_t *slot = (const int64_t *)positions.buf;
        size_t bytes = 0;
        for (Py_ssize_t i = 0; i < count; i++) bytes += (size_t)pairs[i].value.len;
        PyThreadState *state = release_if_large(bytes);
        for (Py_ssize_t i = 0; i < count; i++) copy_slots(&pairs[i], slot);
        restore(state);
    }
    for (Py_ssize_t i = 0; i < held; i++) {
        PyBuffer_Release(&pairs[i].cache);
        PyBuffer_Release(&pairs[i].value);
    }
    PyMem_Free(pairs);
    PyBuffer_Release(&positions);
    if (!problem) Py_RETURN_NONE;
    if (*problem) PyErr_SetString(PyExc_ValueError, problem);  /* "": the buffer protocol's own error is set */
    return NULL;
}

/* ---- greedy_choose ----------------------------------------------------------------------------- */

typedef struct {
    const float *log_probs;  /* (N, V) */
    const int64_t *rows, *lengths;
    int64_t N, V, B, T, step, eos;
    int64_t *tokens, *places, *chosen;  /* (B, T), (B, T), (N,) */
    float *scores;                      /* (B, T) */
} Choice;

/* the first column of the row's largest value; -1 for a NaN */
static int64_t best_scalar(const float *row, int64_t V) {
    int64_t best = 0;
    for (int64_t c = 0; c < V; c++) {
        if (row[c] != row[c]) return -1;
        if (row[c] > row[best]) best = c;
    }
    return best;
}

#ifdef HAVE_AVX2_PATH
/* two passes: the largest value (four accumulators, a NaN noted), then the first column holding it */
__attribute__((target("avx2"))) static int64_t best_avx2(const float *row, int64_t V) {
    if (V < 32) return best_scalar(row, V);
    __m256 m0 = _mm256_loadu_ps(row), m1 = m0, m2 = m0, m3 = m0, nan = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 32 <= V; c += 32) {
        __m256 a = _mm256_loadu_ps(row + c), b = _mm256_loadu_ps(row + c + 8);
        __m256 x = _mm256_loadu_ps(row + c + 16), y = _mm256_loadu_ps(row + c + 24);
        nan = _mm256_or_ps(nan, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(x, y, _CMP_UNORD_Q)));
        m0 = _mm256_max_ps(m0, a), m1 = _mm256_max_ps(m1, b), m2 = _mm256_max_ps(m2, x), m3 = _mm256_max_ps(m3, y);
    }
    if (_mm256_movemask_ps(nan)) return -1;
    float lanes[8], top;
    _mm256_storeu_ps(lanes, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    top = lanes[0];
    for (int k = 1; k < 8; k++) top = lanes[k] > top ? lanes[k] : top;
    for (int64_t r = c; r < V; r++) {
        if (row[r] != row[r]) return -1;
        top = row[r] > top ? row[r] : top;
    }
    __m256 want = _mm256_set1_ps(top);
    for (c = 0; c + 8 <= V; c += 8) {
        int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(row + c), want, _CMP_EQ_OQ));
        if (mask) return c + __builtin_ctz(mask);
    }
    for (; c < V; c++)
        if (row[c] == top) return c;
    return 0;  /* not reached: top is one of the row's values */
}
#endif

static int64_t best_column(const float *row, int64_t V, int avx2) {
#ifdef HAVE_AVX2_PATH
    if (avx2) return best_avx2(row, V);
#else
    (void)avx2;
#endif
    return best_scalar(row, V);
}

/* rows that end, or -1 on a NaN (nothing written but chosen) */
static int64_t choose(const Choice *c, int avx2) {
    for (int64_t i = 0; i < c->N; i++)
        if ((c->chosen[i] = best_column(c->log_probs + i * c->V, c->V, avx2)) < 0) return -1;
    int64_t ending = 0;
    for (int64_t i = 0; i < c->N; i++) {
        int64_t at = c->rows[i] * c->T + c->step, token = c->chosen[i];
        c->tokens[at] = token;
        c->scores[at] = c->log_probs[i * c->V + token];
        c->places[at] = i;
        ending += token == c->eos || c->step + 1 >= c->lengths[c->rows[i]];
    }
    return ending;
}

static const char *check_choice(Py_buffer *b, Py_ssize_t step) {
    Py_buffer *lp = &b[0], *rows = &b[1], *lengths = &b[2], *tokens = &b[3], *scores = &b[4], *places = &b[5];
    Py_buffer *chosen = &b[6];
    if (lp->ndim != 2 || lp->itemsize != 4 || strcmp(lp->format, "f") != 0) return "log_probs must be a 2-D float32 array";
    if (rows->ndim != 1 || !is_int64(rows) || rows->shape[0] != lp->shape[0]) return "rows must be int64, one a row";
    if (chosen->ndim != 1 || !is_int64(chosen) || chosen->shape[0] != lp->shape[0]) return "chosen must be int64, one a row";
    if (lengths->ndim != 1 || !is_int64(lengths)) return "lengths must be a 1-D int64 array";
    if (tokens->ndim != 2 || !is_int64(tokens) || places->ndim != 2 || !is_int64(places) || scores->ndim != 2 ||
        scores->itemsize != 4 || strcmp(scores->format, "f") != 0)
        return "tokens and places must be int64, scores float32, 2-D";
    int64_t B = lengths->shape[0], T = tokens->shape[1];
    if (tokens->shape[0] != B || places->shape[0] != B || scores->shape[0] != B || places->shape[1] != T ||
        scores->shape[1] != T)
        return "tokens, scores and places must be (sentences, steps)";
    if (step < 0 || step >= T) return "step must be in 0..steps-1";
    if (lp->shape[1] < 1) return "log_probs must have a column";
    const int64_t *r = rows->buf;
    for (Py_ssize_t i = 0; i < rows->shape[0]; i++)
        if (r[i] < 0 || r[i] >= B) return "a row's sentence is outside the tables";
    return NULL;
}

static PyObject *greedy_choose(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objects[7];
    Py_ssize_t step, eos;
    int avx2 = AVX2;
    if (!PyArg_ParseTuple(args, "OOnOnOOOO|p", &objects[0], &objects[1], &step, &objects[2], &eos, &objects[3],
                          &objects[4], &objects[5], &objects[6], &avx2))
        return NULL;
    Py_buffer b[7];
    int held = take_buffers(objects, 7, 3, b);
    const char *problem = held < 7 ? "" : check_choice(b, step);
    int64_t ending = 0;
    if (!problem) {
        Choice c = {(const float *)b[0].buf, (const int64_t *)b[1].buf, (const int64_t *)b[2].buf, b[0].shape[0],
                    b[0].shape[1], b[2].shape[0], b[3].shape[1], step, eos, (int64_t *)b[3].buf,
                    (int64_t *)b[5].buf, (int64_t *)b[6].buf, (float *)b[4].buf};
        PyThreadState *state = release_if_large((size_t)b[0].len);
        ending = choose(&c, avx2 && AVX2);
        restore(state);
    }
    if (!released(b, held, problem)) return NULL;
    return PyLong_FromLongLong(ending);
}

static PyMethodDef methods[] = {
    {"top_per_row", top_per_row, METH_VARARGS,
     "top_per_row(values, n, out[, avx2]) -> bool: each row's columns of its n largest values into out, ascending; "
     "lower columns among equal values. False when a row holds a NaN."},
    {"beam_candidates", beam_candidates, METH_VARARGS,
     "beam_candidates(log_probs, cum, K, n, rows, tokens, totals[, avx2]) -> bool: each sentence's 2K best "
     "continuations over its K rows' n best tokens, best first. False when a value is NaN."},
    {"move_rows", move_rows, METH_VARARGS,
     "move_rows(arrays, rows, moved): in place, row moved[i] of every array becomes its row rows[moved[i]]."},
    {"write_slots", write_slots, METH_VARARGS,
     "write_slots(caches, values, positions): each row's value into its cache slot, for every cache."},
    {"greedy_choose", greedy_choose, METH_VARARGS,
     "greedy_choose(log_probs, rows, step, lengths, eos, tokens, scores, places, chosen[, avx2]) -> int: each row's "
     "best token and its log-prob into the sentence's tables; the rows that end, or -1 for a NaN."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "Steps of the decoding loop in C (service/engine/native.py).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    AVX2 = cpu_has_avx2();
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "AVX2", AVX2) < 0 || PyModule_AddIntConstant(m, "MAX_N", MAX_N) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
