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
 * Shapes judged *kept* (plain lines of a known template, no error in them) are in the table too,
 * with the KEEP flag and a slot id: their lines are counted per slot (count, last line) here, and
 * only the rank and host of a line whose rank/host fields carry values not seen before for that
 * slot (a *variant*) go back to Python, so that a template's rank and host sets stay complete.
 * A kept shape whose lines carry a training signal in a layout no filter rule knows (a loss-like
 * value, a step counter: app/core/signals.py) also carries FLAG_KEEP_EXTRACT / FLAG_KEEP_PROGRESS
 * (`mark_keep`): its lines are sampled and go to the progress ring like a filter rule's metric lines.
 * Lines of a `\r`-redrawn progress bar are dropped here when every segment's shape is known. The fields are
 * ranges of shape positions (the number of non-digit bytes before a digit run), learned by the
 * Python side from the shape's first line.
 * `scan_from` stops after a given number of new-shape lines, so that the Python side judges the new
 * shapes and resumes: lines of a shape learned in the middle of a chunk are then dropped or
 * counted here, not in Python.
 * The Python side (app/core/compressor.py) judges new shapes with the rules and adds them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_shapehash.h"
#include "_shapetable.h"
#include "_keptslots.h"
#include "_foldkey.h"


static int ShapeTable_init(ShapeTable *self, PyObject *args, PyObject *kwds) {
    Py_ssize_t nrules = 0, max_members = 512;
    static char *kwlist[] = {"nrules", "max_members", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|n", kwlist, &nrules, &max_members)) return -1;
    if (max_members < 0 || max_members > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "max_members out of range");
        return -1;
    }
    self->max_members = (uint32_t)max_members;
    if (nrules < 0 || nrules > VALUE_MASK) {
        PyErr_SetString(PyExc_ValueError, "nrules out of range");
        return -1;
    }
    self->ncounts = (size_t)nrules;
    self->counts = PyMem_RawCalloc(nrules ? nrules : 1, sizeof(uint64_t));
    if (!self->counts || table_grow(self) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void ShapeTable_dealloc(ShapeTable *self) {
    PyMem_RawFree(self->touched);
    for (size_t i = 0; i < self->nkeep; i++) {
        PyMem_RawFree(self->keep[i].text);
        PyMem_RawFree(self->keep[i].ranks);
        PyMem_RawFree(self->keep[i].hosts);
    }
    PyMem_RawFree(self->pairs.keys);
    PyMem_RawFree(self->ranks.keys);
    PyMem_RawFree(self->hostkeys.keys);
    PyMem_RawFree(self->hostids);
    for (size_t i = 0; i < self->nhostnames; i++) PyMem_RawFree(self->host_bytes[i]);
    PyMem_RawFree(self->host_bytes);
    PyMem_RawFree(self->host_len);
    PyMem_RawFree(self->keep);
    PyMem_RawFree(self->variants.keys);
    PyMem_RawFree(self->slots);
    PyMem_RawFree(self->counts);
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
    if (table_put(self, key, rule | (extract ? FLAG_EXTRACT : 0) | (progress ? FLAG_PROGRESS : 0)) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* add_prefix(segment): a \r segment of this shape is only a launcher prefix (skipped like a
 * blank one in \r lines; a whole line of this shape is still judged by Python) */
static PyObject *ShapeTable_add_prefix(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    if (!PyArg_ParseTuple(args, "y*", &line)) return NULL;
    const unsigned char *p = line.buf;
    uint64_t key = shape_hash(p, p + line.len);
    PyBuffer_Release(&line);
    if (table_get(self, key) < 0 && table_put(self, key, FLAG_PREFIX) < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* mark_keep(line, extract, progress) -> bool: flag a kept shape's lines as metric samples and/or
 * progress markers (a format-free training signal); False when the shape is not kept here. */
static PyObject *ShapeTable_mark_keep(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    int extract = 0, progress = 0;
    if (!PyArg_ParseTuple(args, "y*pp", &line, &extract, &progress)) return NULL;
    const unsigned char *p = line.buf;
    uint64_t key = shape_hash(p, p + line.len);
    PyBuffer_Release(&line);
    int32_t v = table_get(self, key);
    if (v < 0 || !(v & FLAG_KEEP)) Py_RETURN_FALSE;
    v |= (extract ? FLAG_KEEP_EXTRACT : 0) | (progress ? FLAG_KEEP_PROGRESS : 0);
    if (table_put(self, key, v) < 0) return PyErr_NoMemory();
    Py_RETURN_TRUE;
}

static PyObject *ShapeTable_contains(ShapeTable *self, PyObject *args) {
    Py_buffer line;
    if (!PyArg_ParseTuple(args, "y*", &line)) return NULL;
    const unsigned char *p = line.buf;
    int32_t v = table_get(self, shape_hash(p, p + line.len));
    PyBuffer_Release(&line);
    return PyBool_FromLong(v >= 0 && !(v & (FLAG_KEEP | FLAG_PREFIX)));
}

/* A line with \r in it is a series of segments (a progress bar redrawn in place). When every
 * segment that is not blank has a droppable shape, the line is dropped under the rule of its last
 * segment (the Python side judges a segment exactly like a line: app/core/compressor.py
 * `_cr_line`); the span of the last progress segment, relative to the line, is returned in
 * seg_a/seg_b (-1: none). Returns the last segment's value, or -1 when Python must see the line
 * (a segment of unknown or kept shape, or no segment at all). Blank means the ASCII whitespace
 * that Python's str.strip() removes; anything else, even a Unicode space, is looked up. */
#define CR_LINE_MAX 65536
static int32_t cr_line(const ShapeTable *t, const unsigned char *p, const unsigned char *end,
                       Py_ssize_t *seg_a, Py_ssize_t *seg_b) {
    const unsigned char *line = p;
    int32_t last = -1;
    while (p <= end) {
        const unsigned char *cr = memchr(p, '\r', (size_t)(end - p));
        const unsigned char *seg_end = cr ? cr : end;
        int blank = 1;
        for (const unsigned char *q = p; q < seg_end; q++) {
            unsigned char c = *q;
            if (!(c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f))) {
                blank = 0;
                break;
            }
        }
        if (!blank) {
            int32_t v = table_get(t, shape_hash(p, seg_end));
            if (v >= 0 && (v & FLAG_PREFIX)) goto next; /* "[rank3]:" before the bar's first \r */
            if (v < 0 || (v & FLAG_KEEP)) return -1;
            last = v;
            if (v & FLAG_PROGRESS) {
                *seg_a = p - line;
                *seg_b = seg_end - line;
            }
        }
    next:
        if (!cr) break;
        p = cr + 1;
    }
    return last;
}

/* A growable array of (index, start, end) triples, filled without the GIL. */
typedef struct {
    Py_ssize_t *v;
    size_t n, cap; /* in triples */
} Triples;

static int triples_push(Triples *t, Py_ssize_t i, Py_ssize_t a, Py_ssize_t b) {
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 64;
        Py_ssize_t *nv = PyMem_RawRealloc(t->v, ncap * 3 * sizeof(Py_ssize_t));
        if (!nv) return -1;
        t->v = nv;
        t->cap = ncap;
    }
    Py_ssize_t *slot = t->v + 3 * t->n++;
    slot[0] = i;
    slot[1] = a;
    slot[2] = b;
    return 0;
}

static PyObject *triples_list(const Py_ssize_t *v, size_t n) {
    PyObject *out = PyList_New((Py_ssize_t)n);
    if (!out) return NULL;
    for (size_t k = 0; k < n; k++) {
        PyObject *t = Py_BuildValue("(nnn)", v[3 * k], v[3 * k + 1], v[3 * k + 2]);
        if (!t) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)k, t);
    }
    return out;
}

/* The scan loop over buf[start:]: line indices start at idx0, line numbers (for kept slots) at
 * line0 + index. Stops after max_surv survivors (0: no limit) at the start of the next line.
 * Runs without the GIL (a decoding thread, or the server's other threads, go on meanwhile): it
 * touches only C memory; the Python lists are built after. One thread per table at a time.
 * Returns (end_index, end_offset, survivors, samples, last_progress_lines, n_extract). */
static PyObject *scan_core(ShapeTable *self, Py_buffer *buf, Py_ssize_t start, Py_ssize_t idx0,
                           long long line0, Py_ssize_t every, Py_ssize_t n_extract0, Py_ssize_t max_surv) {
    if (every < 1) every = 1;
    if (start < 0 || start > buf->len) {
        PyErr_SetString(PyExc_ValueError, "start out of range");
        return NULL;
    }
    const unsigned char *base = buf->buf, *p = base + start, *stop = base + buf->len;
    Py_ssize_t idx = idx0, n_extract = n_extract0, n_prog = 0, n_surv = 0;
    Py_ssize_t ring[LAST_PROGRESS][3]; /* the last progress lines: index, start, end */
    Triples surv = {NULL, 0, 0}, samples = {NULL, 0, 0};
    int failed = 0; /* out of memory */
    Py_BEGIN_ALLOW_THREADS
    while (p < stop) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(stop - p));
        const unsigned char *end = nl ? nl : stop;
        int32_t v = table_get(self, shape_hash(p, end));
        Py_ssize_t a = p - base, b = end - base;
        int back = v < 0 || (v & FLAG_PREFIX);
        Py_ssize_t kind = 0;
        if (back && b - a <= CR_LINE_MAX && memchr(p, '\r', (size_t)(end - p))) {
            /* a \r-rewritten line (progress bar): dropped here when every segment is */
            Py_ssize_t seg_a = -1, seg_b = -1;
            int32_t last = cr_line(self, p, end, &seg_a, &seg_b);
            if (last >= 0) {
                back = 0;
                self->counts[last & VALUE_MASK]++;
                if (seg_a >= 0) {
                    Py_ssize_t *slot = ring[n_prog % LAST_PROGRESS];
                    slot[0] = idx;
                    slot[1] = a + seg_a;
                    slot[2] = a + seg_b;
                    n_prog++;
                }
                idx++;
                p = nl ? nl + 1 : stop;
                continue;
            }
        }
        int extract = 0, progress = 0;
        if (!back && (v & FLAG_KEEP)) {
            kind = (Py_ssize_t)(v & KEEP_MASK) + 1;
            back = keep_line(self, v, p, end, line0 + idx, a, b);
            if (back < 0) {
                failed = 1;
                break;
            }
            extract = v & FLAG_KEEP_EXTRACT; /* (0 for plain kept shapes: nothing more to do) */
            progress = v & FLAG_KEEP_PROGRESS;
        } else if (!back) {
            self->counts[v & VALUE_MASK]++;
            extract = v & FLAG_EXTRACT;
            progress = v & FLAG_PROGRESS;
        }
        if (extract | progress) {
            if (extract) {
                if (n_extract % every == 0) {
                    if (triples_push(&samples, idx, a, b) < 0) {
                        failed = 1;
                        break;
                    }
                    if (samples.n >= MAX_SAMPLES) { /* the stride was a bad guess: keep every other */
                        for (size_t j = 0; j < samples.n / 2; j++)
                            memcpy(samples.v + 3 * j, samples.v + 3 * (2 * j), 3 * sizeof(Py_ssize_t));
                        samples.n /= 2;
                        every *= 2;
                    }
                }
                n_extract++;
            }
            if (progress) {
                Py_ssize_t *slot = ring[n_prog % LAST_PROGRESS];
                slot[0] = idx;
                slot[1] = a;
                slot[2] = b;
                n_prog++;
            }
        }
        if (back && kind) { /* a new rank/host of a kept shape: recorded here */
            if (record_variant(self, (size_t)(kind - 1), p, end) < 0) {
                failed = 1;
                break;
            }
        } else if (back) {
            if (triples_push(&surv, idx, a, b) < 0) {
                failed = 1;
                break;
            }
            n_surv++;
        }
        idx++;
        p = nl ? nl + 1 : stop;
        if (max_surv > 0 && n_surv >= max_surv) break;
    }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL, *ls = NULL, *lm = NULL, *lp = NULL;
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t prog[LAST_PROGRESS * 3];
    size_t np = 0;
    for (Py_ssize_t k = n_prog > LAST_PROGRESS ? n_prog - LAST_PROGRESS : 0; k < n_prog; k++, np++)
        memcpy(prog + 3 * np, ring[k % LAST_PROGRESS], 3 * sizeof(Py_ssize_t));
    ls = triples_list(surv.v, surv.n);
    lm = triples_list(samples.v, samples.n);
    lp = triples_list(prog, np);
    if (ls && lm && lp)
        result = Py_BuildValue("(nnOOOn)", idx, (Py_ssize_t)(p - base), ls, lm, lp, n_extract);
done:
    Py_XDECREF(ls);
    Py_XDECREF(lm);
    Py_XDECREF(lp);
    PyMem_RawFree(surv.v);
    PyMem_RawFree(samples.v);
    return result;
}

/* scan(chunk, sample_every) -> (n_lines, survivors (index, start, end), samples, last_progress_lines, n_extract) */
static PyObject *ShapeTable_scan(ShapeTable *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t every = 1;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &every)) return NULL;
    PyObject *r = scan_core(self, &buf, 0, 0, 1, every, 0, 0);
    PyBuffer_Release(&buf);
    if (!r) return NULL;
    PyObject *out = Py_BuildValue("(OOOOO)", PyTuple_GET_ITEM(r, 0), PyTuple_GET_ITEM(r, 2),
                                  PyTuple_GET_ITEM(r, 3), PyTuple_GET_ITEM(r, 4), PyTuple_GET_ITEM(r, 5));
    Py_DECREF(r);
    return out;
}

/* scan_from(chunk, start, idx0, line0, sample_every, n_extract0, max_survivors)
 *   -> (end_index, end_offset, survivors, samples, last_progress_lines, n_extract) */
static PyObject *ShapeTable_scan_from(ShapeTable *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, idx0, every, n_extract0, max_surv;
    long long line0;
    if (!PyArg_ParseTuple(args, "y*nnLnnn", &buf, &start, &idx0, &line0, &every, &n_extract0, &max_surv))
        return NULL;
    PyObject *r = scan_core(self, &buf, start, idx0, line0, every, n_extract0, max_surv);
    PyBuffer_Release(&buf);
    return r;
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
    {"add_prefix", (PyCFunction)ShapeTable_add_prefix, METH_VARARGS,
     "add_prefix(segment): a \\r segment of this shape is only a launcher prefix"},
    {"mark_keep", (PyCFunction)ShapeTable_mark_keep, METH_VARARGS,
     "mark_keep(line, extract, progress) -> bool: sample / track as progress a kept shape's lines"},
    {"has", (PyCFunction)ShapeTable_contains, METH_VARARGS, "has(line): is the line's shape droppable"},
    {"scan", (PyCFunction)ShapeTable_scan, METH_VARARGS,
     "scan(chunk, sample_every) -> (n_lines, survivors (index, start, end), samples, last_progress_lines, n_extract)"},
    {"scan_from", (PyCFunction)ShapeTable_scan_from, METH_VARARGS,
     "scan_from(chunk, start, idx0, line0, sample_every, n_extract0, max_survivors) -> "
     "(end_index, end_offset, survivors, samples, last_progress_lines, n_extract)"},
    {"add_keep", (PyCFunction)ShapeTable_add_keep, METH_VARARGS,
     "add_keep(line, lo1, hi1, lo2, hi2, host_digit=0) -> slot: count the line's shape here (a kept template)"},
    {"probe_keep", (PyCFunction)ShapeTable_probe_keep, METH_VARARGS,
     "probe_keep(line, line_no) -> -1 not kept, 0 counted here"},
    {"keep_counts", (PyCFunction)ShapeTable_keep_counts, METH_NOARGS, "[(count, last_line)] per kept slot"},
    {"save_touched", (PyCFunction)ShapeTable_save_touched, METH_VARARGS,
     "save_touched(buffer): keep a copy of each slot's last counted line of the scanned buffer"},
    {"keep_last", (PyCFunction)ShapeTable_keep_last, METH_NOARGS, "[(line, text)] per kept slot"},
    {"keep_sets", (PyCFunction)ShapeTable_keep_sets, METH_NOARGS,
     "(host names by id, [(ranks, host ids)] per kept slot): the variants recorded here"},
    {"ranks_seen", (PyCFunction)ShapeTable_ranks_seen, METH_NOARGS, "every rank read from a kept line"},
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

/* set_simd(level) -> previous level: choose the compaction (tests compare them all). A level is
 * 0 (the byte loop), 1 (SSSE3) or 2 (AVX-512 VBMI2); True is the best this CPU has, False is 0; a
 * level the CPU lacks falls back to the best one below it. */
static PyObject *set_simd(PyObject *Py_UNUSED(module), PyObject *arg) {
    long level;
    if (PyBool_Check(arg)) {
        level = arg == Py_True ? SIMD_AVX512 : SIMD_NONE;
    } else {
        level = PyLong_AsLong(arg);
        if (level == -1 && PyErr_Occurred()) return NULL;
    }
#ifdef HAVE_SIMD_COMPACT
    int prev = use_simd, best = best_simd();
    use_simd = level <= SIMD_NONE ? SIMD_NONE : (level < best ? (int)level : best);
    return PyLong_FromLong(prev);
#else
    (void)level;
    return PyLong_FromLong(0);
#endif
}

/* simd_levels() -> the compaction levels this CPU can run (see set_simd) */
static PyObject *simd_levels(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
#ifdef HAVE_SIMD_COMPACT
    int best = best_simd();
#else
    int best = 0;
#endif
    PyObject *out = PyList_New(0);
    for (int level = 0; out && level <= best; level++) {
        PyObject *v = PyLong_FromLong(level);
        if (!v || PyList_Append(out, v) < 0) Py_CLEAR(out);
        Py_XDECREF(v);
    }
    return out;
}

/* count_newlines(buf, length) -> the newlines in buf[:length], without the GIL. For buffers that
 * have no count() of their own (the shared mappings a decoding process fills). */
static PyObject *count_newlines(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer buf;
    Py_ssize_t length, count = 0;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &length)) return NULL;
    if (length < 0 || length > buf.len) length = buf.len;
    const char *p = buf.buf, *end = p + length;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        count++;
        p = nl + 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(count);
}

/* lines_with(buf, needle, length, cap) -> [(start, end)]: the spans (without the newline) of the
 * first `cap` lines of buf[:length] that contain `needle`, each line once. memmem runs without the
 * GIL: the NCCL init lines this finds sit in the first 32 MiB of a log, and bytes.find was ~1.4
 * GB/s there (placement.RankHosts.scan). */
static PyObject *lines_with(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer buf;
    const char *needle;
    Py_ssize_t nlen, length, cap;
    if (!PyArg_ParseTuple(args, "y*y#nn", &buf, &needle, &nlen, &length, &cap)) return NULL;
    if (length < 0 || length > buf.len) length = buf.len;
    if (cap < 0) cap = 0;
    Py_ssize_t *spans = NULL, found = 0, room = 0;
    int failed = 0;
    const char *base = buf.buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t pos = 0;
    while (nlen > 0 && found < cap && pos < length) {
        const char *hit = memmem(base + pos, (size_t)(length - pos), needle, (size_t)nlen);
        if (!hit) break;
        Py_ssize_t at = hit - base, start = at, end;
        while (start > 0 && base[start - 1] != '\n') start--;
        const char *nl = memchr(hit, '\n', (size_t)(length - at));
        end = nl ? nl - base : length;
        if (found == room) { /* grown as lines are found: most buffers hold none */
            Py_ssize_t want = room ? 2 * room : 64;
            Py_ssize_t *more = PyMem_RawRealloc(spans, sizeof(Py_ssize_t) * 2 * (size_t)want);
            if (!more) {
                failed = 1;
                break;
            }
            spans = more;
            room = want;
        }
        spans[2 * found] = start;
        spans[2 * found + 1] = end;
        found++;
        pos = end + 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (failed) {
        PyMem_RawFree(spans);
        return PyErr_NoMemory();
    }
    PyObject *out = PyList_New(found);
    for (Py_ssize_t i = 0; out && i < found; i++) {
        PyObject *pair = Py_BuildValue("(nn)", spans[2 * i], spans[2 * i + 1]);
        if (!pair) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, pair);
    }
    PyMem_RawFree(spans);
    return out;
}

static PyMethodDef module_methods[] = {
    {"fold_ascii", fold_ascii, METH_O,
     "fold_ascii(text) -> the template key fields.fold_key gives, or None for non-ASCII text"},
    {"set_simd", set_simd, METH_O,
     "set_simd(level) -> previous level of the compaction (0 bytes, 1 SSSE3, 2 AVX-512; True: the best)"},
    {"simd_levels", simd_levels, METH_NOARGS, "simd_levels() -> the compaction levels this CPU can run"},
    {"count_newlines", count_newlines, METH_VARARGS,
     "count_newlines(buf, length) -> the newlines in buf[:length]"},
    {"lines_with", lines_with, METH_VARARGS,
     "lines_with(buf, needle, length, cap) -> [(start, end)] of the lines of buf[:length] holding needle"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_shapescan", "C scan loop for logdx compression.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__shapescan(void) {
#ifdef HAVE_SIMD_COMPACT
    init_simd();
#endif
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
