/*
 * Shape scanner: the hot loop of log compression.
 *
 * A line's *shape* is the line with its ASCII digits deleted. ShapeTable holds the 64-bit hashes
 * of the shapes already judged droppable, each with a small integer value (the filter rule index
 * and two flags). `scan(chunk)` walks a chunk line by line without creating Python objects for
 * dropped lines: it counts drops per value and reports only
 *   - the lines whose shape is not in the table (survivors) as (index, start, end) triples,
 *   - every k-th line whose value carries the EXTRACT flag (metric samples),
 *   - the last LAST_PROGRESS lines whose value carries the PROGRESS flag.
 * The Python side (app/core/compressor.py) judges new shapes with the rules and adds them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FLAG_EXTRACT 0x10000
#define FLAG_PROGRESS 0x20000
#define VALUE_MASK 0xFFFF
#define LAST_PROGRESS 4

typedef struct {
    uint64_t key; /* 0 = empty */
    int32_t val;
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    size_t cap; /* power of two */
    size_t used;
    uint64_t *counts; /* per rule index */
    size_t ncounts;
} ShapeTable;

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* Hash of the line with digits deleted. Bytes are compacted (digits skipped, branch-free: the
 * digits of metric lines are random, so a branch would mispredict) into a small buffer that is
 * hashed 8 bytes at a time; the partial word left at the end of a block is carried into the next
 * block, so the hash depends only on the digit-deleted bytes, not on where blocks end. */
#define BLOCK 256
static inline uint64_t shape_hash(const unsigned char *p, const unsigned char *end) {
    unsigned char tmp[BLOCK + 8];
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    size_t carry = 0, total = 0;
    while (p < end) {
        size_t n = (size_t)(end - p);
        if (n > BLOCK) n = BLOCK;
        size_t k = carry;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = p[i];
            tmp[k] = c;
            k += (unsigned)(c - '0') >= 10u;
        }
        p += n;
        size_t full = k & ~(size_t)7;
        for (size_t i = 0; i < full; i += 8) {
            uint64_t w;
            memcpy(&w, tmp + i, 8);
            h = (h ^ w) * 0x100000001B3ULL;
            h ^= h >> 29;
        }
        total += full;
        carry = k - full;
        memmove(tmp, tmp + full, carry);
    }
    uint64_t w = 0;
    memcpy(&w, tmp, carry);
    h = (h ^ w ^ ((uint64_t)carry << 56)) * 0x100000001B3ULL;
    h = mix64(h ^ (total + carry));
    return h ? h : 1;
}

static int table_grow(ShapeTable *t) {
    size_t ncap = t->cap ? t->cap * 2 : 1024;
    Slot *ns = PyMem_Calloc(ncap, sizeof(Slot));
    if (!ns) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].key) continue;
        size_t j = t->slots[i].key & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = t->slots[i];
    }
    PyMem_Free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

static inline int32_t table_get(const ShapeTable *t, uint64_t key) {
    size_t j = key & (t->cap - 1);
    while (t->slots[j].key) {
        if (t->slots[j].key == key) return t->slots[j].val;
        j = (j + 1) & (t->cap - 1);
    }
    return -1;
}

static int ShapeTable_init(ShapeTable *self, PyObject *args, PyObject *kwds) {
    Py_ssize_t nrules = 0;
    static char *kwlist[] = {"nrules", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kwlist, &nrules)) return -1;
    if (nrules < 0 || nrules > VALUE_MASK) {
        PyErr_SetString(PyExc_ValueError, "nrules out of range");
        return -1;
    }
    self->ncounts = (size_t)nrules;
    self->counts = PyMem_Calloc(nrules ? nrules : 1, sizeof(uint64_t));
    if (!self->counts || table_grow(self) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void ShapeTable_dealloc(ShapeTable *self) {
    PyMem_Free(self->slots);
    PyMem_Free(self->counts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *ShapeTable_add(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    int rule, extract = 0, progress = 0;
    if (!PyArg_ParseTuple(args, "y*i|pp", &line, &rule, &extract, &progress)) return NULL;
    if (rule < 0 || (size_t)rule >= self->ncounts) {
        PyBuffer_Release(&line);
        PyErr_SetString(PyExc_ValueError, "rule index out of range");
        return NULL;
    }
    const unsigned char *p = line.buf;
    uint64_t key = shape_hash(p, p + line.len);
    PyBuffer_Release(&line);
    if ((self->used + 1) * 2 > self->cap && table_grow(self) < 0) return PyErr_NoMemory();
    size_t j = key & (self->cap - 1);
    while (self->slots[j].key && self->slots[j].key != key) j = (j + 1) & (self->cap - 1);
    if (!self->slots[j].key) self->used++;
    self->slots[j].key = key;
    self->slots[j].val = rule | (extract ? FLAG_EXTRACT : 0) | (progress ? FLAG_PROGRESS : 0);
    Py_RETURN_NONE;
}

static PyObject *ShapeTable_contains(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    if (!PyArg_ParseTuple(args, "y*", &line)) return NULL;
    const unsigned char *p = line.buf;
    int32_t v = table_get(self, shape_hash(p, p + line.len));
    PyBuffer_Release(&line);
    return PyBool_FromLong(v >= 0);
}

static int append_triple(PyObject *list, Py_ssize_t i, Py_ssize_t a, Py_ssize_t b) {
    PyObject *t = Py_BuildValue("(nnn)", i, a, b);
    if (!t) return -1;
    int r = PyList_Append(list, t);
    Py_DECREF(t);
    return r;
}

/* scan(chunk, sample_every) -> (n_lines, survivors, samples, last_progress_lines, n_extract) */
static PyObject *ShapeTable_scan(ShapeTable *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t every = 1;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &every)) return NULL;
    if (every < 1) every = 1;
    PyObject *surv = PyList_New(0), *samples = PyList_New(0), *result = NULL;
    if (!surv || !samples) goto done;
    const unsigned char *base = buf.buf, *p = base, *stop = base + buf.len;
    Py_ssize_t idx = 0, n_extract = 0, n_prog = 0;
    Py_ssize_t ring[LAST_PROGRESS][3]; /* the last progress lines: index, start, end */
    while (p < stop) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(stop - p));
        const unsigned char *end = nl ? nl : stop;
        int32_t v = table_get(self, shape_hash(p, end));
        Py_ssize_t a = p - base, b = end - base;
        if (v < 0) {
            if (append_triple(surv, idx, a, b) < 0) goto done;
        } else {
            self->counts[v & VALUE_MASK]++;
            if (v & FLAG_EXTRACT) {
                if (n_extract % every == 0 && append_triple(samples, idx, a, b) < 0) goto done;
                n_extract++;
            }
            if (v & FLAG_PROGRESS) {
                Py_ssize_t *slot = ring[n_prog % LAST_PROGRESS];
                slot[0] = idx;
                slot[1] = a;
                slot[2] = b;
                n_prog++;
            }
        }
        idx++;
        if (!nl) break;
        p = nl + 1;
    }
    PyObject *prog = PyList_New(0);
    if (!prog) goto done;
    for (Py_ssize_t k = n_prog > LAST_PROGRESS ? n_prog - LAST_PROGRESS : 0; k < n_prog; k++) {
        Py_ssize_t *slot = ring[k % LAST_PROGRESS];
        if (append_triple(prog, slot[0], slot[1], slot[2]) < 0) {
            Py_DECREF(prog);
            goto done;
        }
    }
    result = Py_BuildValue("(nOONn)", idx, surv, samples, prog, n_extract);
done:
    Py_XDECREF(surv);
    Py_XDECREF(samples);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *ShapeTable_counts(ShapeTable *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New((Py_ssize_t)self->ncounts);
    if (!out) return NULL;
    for (size_t i = 0; i < self->ncounts; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(self->counts[i]);
        if (!v) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    return out;
}

static Py_ssize_t ShapeTable_len(ShapeTable *self) { return (Py_ssize_t)self->used; }

static PyMethodDef ShapeTable_methods[] = {
    {"add", (PyCFunction)ShapeTable_add, METH_VARARGS,
     "add(line, rule_index, extract=False, progress=False): mark the line's shape droppable"},
    {"has", (PyCFunction)ShapeTable_contains, METH_VARARGS, "has(line): is the line's shape droppable"},
    {"scan", (PyCFunction)ShapeTable_scan, METH_VARARGS,
     "scan(chunk, sample_every) -> (n_lines, survivors, samples, last_progress_lines, n_extract)"},
    {"counts", (PyCFunction)ShapeTable_counts, METH_NOARGS, "lines dropped per rule index"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods ShapeTable_as_sequence = {
    .sq_length = (lenfunc)ShapeTable_len,
};

static PyTypeObject ShapeTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.core._shapescan.ShapeTable",
    .tp_basicsize = sizeof(ShapeTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Hash set of droppable line shapes with a C scan loop.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ShapeTable_init,
    .tp_dealloc = (destructor)ShapeTable_dealloc,
    .tp_methods = ShapeTable_methods,
    .tp_as_sequence = &ShapeTable_as_sequence,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_shapescan", "C scan loop for logdx compression.", -1, NULL,
};

PyMODINIT_FUNC PyInit__shapescan(void) {
    if (PyType_Ready(&ShapeTableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&ShapeTableType);
    if (PyModule_AddObject(m, "ShapeTable", (PyObject *)&ShapeTableType) < 0) {
        Py_DECREF(&ShapeTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
